// The Lush replay page: a window of the decision log decided again with a candidate build (GET
// /audit/replay), the flips counted by principal, agent and tool, and any changed decision opened
// beside the candidate's. Everything from the server is put on the page as text.
'use strict';

(function () {
  const ui = window.LushUI;
  const { el, clear, pretty } = ui;
  const $ = (id) => document.getElementById(id);

  let last = null;

  function showError(res) {
    ui.showError($('error'), res, 'Enter the bearer token (API key or JWT) of a principal that holds the audit role in lush.yaml roles.');
  }

  function outcomeClass(o) {
    return 'outcome-' + String(o || '').replace(/[^a-z_]/g, '');
  }

  function counts(ul, list, field) {
    clear(ul);
    for (const c of list || []) {
      const li = el('li');
      const b = el('button', c.name + ' \u2014 ' + c.flips);
      b.type = 'button';
      b.className = 'count';
      b.addEventListener('click', () => { $('f-' + field).value = c.name; run(); });
      li.appendChild(b);
      ul.appendChild(li);
    }
    if (!list || list.length === 0) ul.appendChild(el('li', '(none)', 'note'));
  }

  function side(outcome, rules, reasons, json, d) {
    const o = $(outcome);
    o.textContent = d.outcome || '(none)';
    o.className = outcomeClass(d.outcome);
    $(rules).textContent = (d.rules || []).join(', ');
    const ul = $(reasons);
    clear(ul);
    for (const r of (d.reasons || []).concat(d.approvals || [])) {
      const li = el('li');
      li.appendChild(el('code', r.rule));
      li.appendChild(document.createTextNode(': ' + r.message));
      ul.appendChild(li);
    }
    $(json).textContent = pretty(d);
  }

  function open(f, tr) {
    document.querySelectorAll('#flips tr.selected').forEach((r) => r.classList.remove('selected'));
    tr.classList.add('selected');
    $('side-id').textContent = f.decision_id;
    side('logged-outcome', 'logged-rules', 'logged-reasons', 'logged-json', f.logged || {});
    side('cand-outcome', 'cand-rules', 'cand-reasons', 'cand-json', f.candidate || {});
    $('cand-build').textContent = String(last.bundle || '').slice(0, 12);
    $('side-open').href = './#' + encodeURIComponent(f.decision_id);
    $('side-play').href = 'playground.html#' + encodeURIComponent(f.decision_id);
    $('side-box').hidden = false;
  }

  async function run() {
    const u = new URL('../audit/replay', window.location.href);
    u.searchParams.set('build', $('build').value);
    for (const f of ['since', 'until', 'principal', 'agent', 'tool']) {
      const v = $('f-' + f).value.trim();
      if (v) u.searchParams.set(f, v);
    }
    $('status').textContent = 'Replaying…';
    const res = await ui.request(u, 'GET');
    if (res.status !== 200 || !res.body || !Array.isArray(res.body.changed)) {
      showError(res);
      $('status').textContent = 'The replay could not run.';
      return;
    }
    ui.hideError($('error'));
    last = res.body;
    $('side-box').hidden = true;
    const n = last.changed.length;
    $('summary').textContent = 'Replayed ' + last.replayed + ' logged decisions from ' + ui.when(last.since) + ' to ' + ui.when(last.until) +
      ' under build ' + String(last.bundle).slice(0, 12) + ' (' + last.skipped + ' skipped: input not logged): ' + n + (n === 1 ? ' would change.' : ' would change.') +
      (last.truncated ? ' Only the newest were replayed: narrow the window to see the rest.' : '');
    counts($('by-principal'), last.by_principal, 'principal');
    counts($('by-agent'), last.by_agent, 'agent');
    counts($('by-tool'), last.by_tool, 'tool');
    const tbody = $('flips');
    clear(tbody);
    for (const f of last.changed) {
      const tr = el('tr', null, 'flip');
      tr.dataset.id = f.decision_id;
      tr.appendChild(el('td', f.time));
      tr.appendChild(el('td', f.principal));
      tr.appendChild(el('td', f.agent || ''));
      tr.appendChild(el('td', f.action));
      tr.appendChild(el('td', f.tool || ''));
      tr.appendChild(el('td', f.was, outcomeClass(f.was)));
      tr.appendChild(el('td', f.now, outcomeClass(f.now)));
      tr.appendChild(el('td', f.decision_id, 'id'));
      ui.rowKeys(tr, () => open(f, tr));
      tbody.appendChild(tr);
    }
    $('status').textContent = 'This replay is decision ' + res.decisionID + '.';
  }

  async function load() {
    $('status').textContent = 'Loading…';
    const builds = await ui.buildPicker($('build'), $('error'));
    if (!builds) { $('status').textContent = 'The builds could not be read.'; return; }
    $('status').textContent = builds.length === 0 ? 'This server keeps no builds (lushctl build keeps them).' : 'Pick a candidate build and a window, then Replay.';
  }

  function init() {
    ui.tokenForm(load, showError);
    $('controls').addEventListener('submit', (ev) => { ev.preventDefault(); run(); });
    if (ui.token()) load();
  }

  ui.ready(init);
})();
