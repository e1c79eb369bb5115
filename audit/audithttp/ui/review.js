// The Lush access review page: a build's matrix of subject × agent × tool × access (GET
// /audit/builds/{hash}/review), filtered in the page, with the diff against another build
// highlighted (?diff=) and exported as CSV (the API's own CSV, fetched with the token and saved
// through a Blob). Everything from the server is put on the page as text.
'use strict';

(function () {
  const ui = window.LushUI;
  const { el, clear } = ui;
  const $ = (id) => document.getElementById(id);
  const reviewURL = (hash, diff, format) => {
    const u = new URL('../audit/builds/' + encodeURIComponent(hash) + '/review', window.location.href);
    if (diff) u.searchParams.set('diff', diff);
    if (format) u.searchParams.set('format', format);
    return u;
  };
  const MARK = { added: '+ added', removed: '\u2212 removed', changed: '~ changed' };

  let page = null;
  let asked = 0; // the number of the latest request: an older answer that arrives later is dropped

  function showError(res) {
    ui.showError($('error'), res, 'Enter the bearer token (API key or JWT) of a principal that holds the audit role in lush.yaml roles.');
  }

  function tool(r) {
    if (r.action) return r.action;
    if (!r.name) return r.tool;
    return r.tool + ' (' + (r.name === '*' ? 'any other tool' : r.name) + ')';
  }

  function why(r) {
    let s = (r.granted_by || []).join('; ');
    if (r.conditions && r.conditions.length) s += '; decided per call by ' + r.conditions.join(', ');
    return s;
  }

  function render() {
    const tbody = $('rows');
    clear(tbody);
    if (!page) return;
    const words = $('filter').value.toLowerCase().split(/\s+/).filter(Boolean);
    const outcome = $('f-outcome').value;
    const onlyChanges = $('f-changes').checked;
    let shown = 0;
    for (const r of page.rows) {
      const text = [r.subject, r.agent, tool(r), r.access, r.outcome, why(r), r.change || ''].join(' ').toLowerCase();
      if (words.some((w) => !text.includes(w))) continue;
      if (outcome && r.outcome !== outcome) continue;
      if (onlyChanges && !r.change) continue;
      const tr = el('tr', null, 'row' + (r.change ? ' change-' + String(r.change).replace(/[^a-z]/g, '') : ''));
      tr.tabIndex = 0;
      tr.appendChild(el('td', MARK[r.change] || '', 'change'));
      tr.appendChild(el('td', r.subject));
      tr.appendChild(el('td', r.agent || '\u2013'));
      tr.appendChild(el('td', tool(r)));
      tr.appendChild(el('td', r.was && r.was.access !== r.access ? r.was.access + ' \u2192 ' + r.access : r.access));
      tr.appendChild(el('td', r.was && r.was.outcome !== r.outcome ? r.was.outcome + ' \u2192 ' + r.outcome : r.outcome,
        'outcome-' + String(r.outcome).replace(/[^a-z_]/g, '')));
      tr.appendChild(el('td', why(r)));
      tbody.appendChild(tr);
      shown++;
    }
    const changes = page.rows.filter((r) => r.change).length;
    $('status').textContent = 'Build ' + page.revision.slice(0, 12) + (page.diff ? ' compared with ' + page.diff.slice(0, 12) + ' (' + changes + (changes === 1 ? ' change' : ' changes') + ')' : '') +
      ': ' + shown + ' of ' + page.rows.length + ' rows shown. (This look is decision ' + page.decisionID + '.)';
  }

  async function load() {
    $('status').textContent = 'Loading…';
    const builds = await ui.buildPicker($('build'), $('error'));
    if (!builds) { $('status').textContent = 'The builds could not be read.'; return; }
    await ui.buildPicker($('diff'), $('error'), '(no comparison)');
    if (builds.length === 0) { $('status').textContent = 'This server keeps no builds (lushctl build keeps them).'; return; }
    await show();
  }

  async function show() {
    const n = ++asked;
    const res = await ui.request(reviewURL($('build').value, $('diff').value), 'GET');
    if (n !== asked) return;
    if (res.status !== 200 || !res.body || !Array.isArray(res.body.rows)) {
      showError(res);
      $('status').textContent = 'The review could not be read.';
      return;
    }
    ui.hideError($('error'));
    page = res.body;
    page.decisionID = res.decisionID;
    render();
  }

  async function exportCSV() {
    const hash = $('build').value;
    const diff = $('diff').value;
    const name = 'access-review-' + hash.slice(0, 12) + (diff ? '-vs-' + diff.slice(0, 12) : '') + '.csv';
    const res = await ui.download(reviewURL(hash, diff, 'csv'), 'text/csv', name);
    if (res.status !== 200) { showError(res); return; }
    $('status').textContent = 'Exported ' + name + ' (decision ' + res.decisionID + ').';
  }

  function init() {
    ui.tokenForm(load, showError);
    $('controls').addEventListener('submit', (ev) => { ev.preventDefault(); show(); });
    $('build').addEventListener('change', show);
    $('diff').addEventListener('change', show);
    $('filter').addEventListener('input', render);
    $('f-outcome').addEventListener('change', render);
    $('f-changes').addEventListener('change', render);
    $('csv').addEventListener('click', exportCSV);
    if (ui.token()) load();
  }

  ui.ready(init);
})();
