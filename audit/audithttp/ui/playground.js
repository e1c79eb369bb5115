// The Lush policy playground: one call (principal, groups, agent, tool, arguments) evaluated
// with a build's policy (POST /audit/eval) and explained as `lushctl policy eval` explains it.
// #<decision id> starts from a logged decision: its input (masked as logged) fills the form.
// Nothing is called. Everything from the server is put on the page as text.
'use strict';

(function () {
  const ui = window.LushUI;
  const { el, clear, pretty } = ui;
  const $ = (id) => document.getElementById(id);
  const api = (rel) => new URL('../audit' + rel, window.location.href);

  // base is the logged input the form started from: what the form does not show (chain, depth,
  // environment, the tool's class hints, …) is evaluated as logged.
  let base = {};

  function showError(res) {
    ui.showError($('error'), res, 'Enter the bearer token (API key or JWT) of a principal that holds the audit role in lush.yaml roles.');
  }

  function fill(input, id) {
    base = input || {};
    const p = base.principal || {};
    $('p-principal').value = p.id || '';
    $('p-groups').value = (p.groups || []).join(', ');
    $('p-agent').value = base.agent || '';
    $('p-action').value = base.action || 'tools/call';
    $('p-tool').value = (base.tool && base.tool.ref) || '';
    $('p-tool-name').value = (base.tool && base.tool.name) || '';
    $('p-loop').value = base.loop || '';
    $('p-live').checked = !!base.live_writes;
    $('p-args').value = base.arguments === undefined || base.arguments === null ? '{}' : JSON.stringify(base.arguments, null, 2);
    $('p-from').textContent = id ? 'Started from logged decision ' + id + ' (its input as the log kept it).' : '';
  }

  // input is the form as a policy input, over the logged one it started from.
  function input() {
    const out = JSON.parse(JSON.stringify(base));
    const groups = $('p-groups').value.split(',').map((g) => g.trim()).filter(Boolean);
    out.principal = Object.assign({}, out.principal || {}, { id: $('p-principal').value.trim(), groups: groups });
    out.action = $('p-action').value;
    const agent = $('p-agent').value.trim();
    if (agent !== (base.agent || '')) { delete out.chain; delete out.depth; }
    if (agent) out.agent = agent; else delete out.agent;
    const ref = $('p-tool').value.trim();
    if (ref) {
      out.tool = Object.assign({}, out.tool || {}, { ref: ref, name: $('p-tool-name').value.trim() });
      if (!out.tool.name) delete out.tool.name;
    } else {
      delete out.tool;
    }
    const loop = $('p-loop').value.trim();
    if (loop) out.loop = loop; else delete out.loop;
    out.live_writes = $('p-live').checked;
    const text = $('p-args').value.trim();
    out.arguments = text ? JSON.parse(text) : {};
    return out;
  }

  async function evaluate() {
    let body;
    try {
      body = { input: input() };
    } catch (e) {
      ui.showError($('error'), { status: 0, body: { error: { code: 'arguments', message: 'the arguments are not JSON: ' + e.message } } });
      return;
    }
    if ($('build').value) body.build = $('build').value;
    if ($('p-explain').value) body.explain = $('p-explain').value;
    $('status').textContent = 'Evaluating…';
    const res = await ui.request(api('/eval'), 'POST', body);
    if (res.status !== 200 || !res.body || !res.body.decision) {
      showError(res);
      $('status').textContent = 'The call could not be evaluated.';
      return;
    }
    ui.hideError($('error'));
    const d = res.body.decision;
    const o = $('r-outcome');
    o.textContent = d.outcome;
    o.className = 'outcome-' + String(d.outcome).replace(/[^a-z_]/g, '');
    $('r-rules').textContent = (d.rules || []).join(', ');
    const ul = $('r-reasons');
    clear(ul);
    for (const r of (d.reasons || []).concat(d.approvals || [])) {
      const li = el('li');
      li.appendChild(el('code', r.rule));
      li.appendChild(document.createTextNode(': ' + r.message));
      ul.appendChild(li);
    }
    $('r-explanation').textContent = res.body.explanation || '';
    $('r-decision').textContent = pretty(d);
    $('r-trace').textContent = res.body.trace || '';
    $('r-trace-box').hidden = !res.body.trace;
    $('result').hidden = false;
    $('status').textContent = 'Evaluated with build ' + String(res.body.build).slice(0, 12) + ' (this evaluation is decision ' + res.decisionID + ').';
  }

  // fromHash fills the form from the logged decision #<id>, and evaluates it.
  async function fromHash() {
    const id = decodeURIComponent(window.location.hash.slice(1));
    if (!id) return;
    const res = await ui.request(api('/decisions/' + encodeURIComponent(id)), 'GET');
    if (res.status !== 200 || !res.body || !res.body.event) {
      showError(res);
      return;
    }
    const ev = res.body.event;
    if (!ev.input) {
      ui.showError($('error'), { status: 0, body: { error: { code: 'masked', message: 'the log did not keep the input of decision ' + id + ': fill in the call' } } });
      return;
    }
    fill(ev.input, id);
    await evaluate();
  }

  async function load() {
    const builds = await ui.buildPicker($('build'), $('error'), '(the serving build)');
    if (!builds) { $('status').textContent = 'The builds could not be read.'; return; }
    $('status').textContent = 'Fill in a call and Evaluate, or open a logged decision as #<decision id>.';
    await fromHash();
  }

  function init() {
    ui.tokenForm(load, showError);
    $('pg-form').addEventListener('submit', (ev) => { ev.preventDefault(); evaluate(); });
    window.addEventListener('hashchange', fromHash);
    if (ui.token()) load();
  }

  ui.ready(init);
})();
