// The Lush decision-log UI: read-only, no dependencies. Every value from the log is put on the
// page with textContent (never as HTML), so a logged argument such as <img src=x onerror=…> is
// shown as the text it is.
'use strict';

(function () {
  const FILTERS = ['principal', 'group', 'agent', 'tool', 'access', 'outcome', 'decision_id', 'revision', 'text', 'since', 'until', 'limit'];
  const { token, el, clear, pretty, when } = window.LushUI;

  const $ = (id) => document.getElementById(id);
  const state = { params: null, nextBefore: 0, shown: 0, traceFor: '' };

  // URLs relative to the page (/ui/), so the UI also works under a proxy's prefix.
  const apiURL = (rel) => new URL('../audit/' + rel, window.location.href);
  const tracesURL = (id) => new URL('../traces/' + encodeURIComponent(id), window.location.href);

  function ms(ns) {
    return typeof ns === 'number' ? (ns / 1e6).toFixed(3) + ' ms' : '';
  }

  const getJSON = (url) => window.LushUI.request(url, 'GET');
  const hideError = () => window.LushUI.hideError($('error'));

  // showError shows an API error: its status and code, its message and, for a decision that
  // refused the read, the decision id (to look up in the log).
  function showError(res) {
    window.LushUI.showError($('error'), res, 'Enter the bearer token (API key or JWT) of a principal that holds the audit role in lush.yaml roles.');
  }

  function setStatus(text) {
    $('status').textContent = text;
  }

  function formParams() {
    const p = new URLSearchParams();
    for (const name of FILTERS) {
      const v = $('f-' + name).value.trim();
      if (v !== '') p.set(name, v);
    }
    return p;
  }

  function cell(tr, text, cls) {
    const td = el('td', text, cls);
    tr.appendChild(td);
    return td;
  }

  function toolOf(e) {
    if (!e.tool) return '';
    return e.tool_name ? e.tool + ' (' + e.tool_name + ')' : e.tool;
  }

  function addRow(rec) {
    const e = rec.event || {};
    const tr = document.createElement('tr');
    tr.tabIndex = 0;
    tr.className = 'row outcome-' + String(e.outcome || '').replace(/[^a-z_]/g, '');
    tr.dataset.id = e.decision_id || '';
    cell(tr, when(e.timestamp));
    cell(tr, e.outcome, 'outcome');
    cell(tr, e.principal);
    cell(tr, e.agent);
    cell(tr, toolOf(e));
    cell(tr, e.access);
    cell(tr, e.enforcement_point);
    cell(tr, e.decision_id, 'id');
    const open = () => showDetail(rec);
    tr.addEventListener('click', open);
    tr.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter') open();
    });
    $('rows').appendChild(tr);
  }

  async function search(older) {
    const params = older ? new URLSearchParams(state.params) : formParams();
    if (older) params.set('before', String(state.nextBefore));
    setStatus('Searching…');
    hideError();
    const res = await getJSON(apiURL('decisions?' + params.toString()));
    if (res.status !== 200 || !res.body || !Array.isArray(res.body.decisions)) {
      showError(res);
      setStatus('The search failed.');
      return;
    }
    hideError();
    if (!older) {
      clear($('rows'));
      state.params = params;
      state.shown = 0;
    }
    for (const rec of res.body.decisions) addRow(rec);
    state.shown += res.body.decisions.length;
    state.nextBefore = res.body.next_before || 0;
    $('older').hidden = !state.nextBefore;
    setStatus(state.shown + (state.shown === 1 ? ' decision' : ' decisions') + (state.nextBefore ? ' shown; older ones match too.' : ' shown.') +
      ' (This search is decision ' + res.decisionID + '.)');
  }

  function term(dl, name, value) {
    if (value === undefined || value === null || value === '' || (Array.isArray(value) && value.length === 0)) return;
    dl.appendChild(el('dt', name));
    dl.appendChild(el('dd', Array.isArray(value) ? value.join(', ') : value));
  }

  function showDetail(rec) {
    const e = rec.event || {};
    const result = e.result && typeof e.result === 'object' ? e.result : {};
    $('d-id').textContent = e.decision_id || '';
    $('d-page').href = 'decision.html#' + encodeURIComponent(e.decision_id || '');
    const sum = $('d-summary');
    clear(sum);
    term(sum, 'Time (UTC)', when(e.timestamp));
    term(sum, 'Outcome', e.outcome);
    term(sum, 'Action', e.action);
    term(sum, 'Principal', e.principal);
    term(sum, 'Groups', e.groups);
    term(sum, 'Agent', e.agent);
    term(sum, 'Chain', e.chain);
    term(sum, 'Tool', toolOf(e));
    term(sum, 'Access', e.access);
    term(sum, 'Risk', e.risk);
    term(sum, 'Enforcement point', e.enforcement_point);
    term(sum, 'Bundle revision', e.revision || (e.bundles && e.bundles.lush && e.bundles.lush.revision));
    term(sum, 'Environment', e.environment);
    term(sum, 'Decision latency', ms(e.latency_ns));
    term(sum, 'Error', e.error);
    term(sum, 'Erased from the input', e.erased);
    term(sum, 'Masked in the input', e.masked);
    term(sum, 'Log sequence', rec.seq);

    const rules = $('d-rules');
    clear(rules);
    for (const r of e.rules || []) rules.appendChild(el('li', r));
    if (!rules.firstChild) rules.appendChild(el('li', '(none)'));
    const reasons = $('d-reasons');
    clear(reasons);
    for (const r of [].concat(result.reasons || [], result.approvals || [])) {
      const li = el('li');
      li.appendChild(el('code', r.rule));
      li.appendChild(document.createTextNode(': ' + r.message));
      reasons.appendChild(li);
    }
    if (!reasons.firstChild) reasons.appendChild(el('li', '(none)'));

    $('d-input').textContent = pretty(e.input);
    $('d-result').textContent = pretty(e.result);

    const comp = $('d-completion');
    clear(comp);
    const c = rec.completion;
    const resp = $('d-response');
    resp.hidden = true;
    resp.textContent = '';
    if (c) {
      term(comp, 'Status', c.status);
      term(comp, 'Upstream latency', ms(c.upstream_latency_ns));
      term(comp, 'At (UTC)', when(c.timestamp));
      term(comp, 'Error', c.error);
      term(comp, 'Tokens in / out', c.tokens_input || c.tokens_output ? (c.tokens_input || 0) + ' / ' + (c.tokens_output || 0) : '');
      if (c.response !== undefined && c.response !== null) {
        comp.appendChild(el('dt', 'Response'));
        resp.textContent = pretty(c.response);
        resp.hidden = false;
      }
    } else {
      comp.appendChild(el('dd', 'No completion: a denied decision has none; an allowed call gets one when it ends.'));
    }

    showTrace(e.trace_id || '');
    for (const tr of $('rows').children) tr.classList.toggle('selected', tr.dataset.id === e.decision_id);
    $('detail').hidden = false;
    if (e.decision_id && window.location.hash !== '#' + e.decision_id) {
      window.history.replaceState(null, '', '#' + encodeURIComponent(e.decision_id));
    }
  }

  async function showTrace(id) {
    const p = $('d-trace');
    const table = $('d-spans');
    const body = $('d-span-rows');
    clear(p);
    clear(body);
    table.hidden = true;
    state.traceFor = id;
    if (!id) {
      p.textContent = 'No trace: the decision was not made inside a traced request.';
      return;
    }
    p.appendChild(el('span', 'Trace '));
    p.appendChild(el('code', id, 'trace-id'));
    const res = await getJSON(tracesURL(id));
    if (state.traceFor !== id) return; // another decision was opened meanwhile
    if (res.status !== 200 || !res.body || !Array.isArray(res.body.spans)) {
      p.appendChild(el('span', ' — its spans are not available from this server' + (res.status ? ' (HTTP ' + res.status + ')' : '') + '.'));
      return;
    }
    const n = res.body.spans.length;
    p.appendChild(el('span', ' — ' + n + (n === 1 ? ' span' : ' spans')));
    for (const s of res.body.spans) {
      const tr = document.createElement('tr');
      const indent = s.parent_span_id ? '  ' : '';
      cell(tr, indent + s.name);
      cell(tr, when(s.start));
      cell(tr, typeof s.duration_ms === 'number' ? s.duration_ms.toFixed(3) + ' ms' : '');
      cell(tr, s.status + (s.status_message ? ': ' + s.status_message : ''));
      body.appendChild(tr);
    }
    table.hidden = false;
  }

  async function openFromHash() {
    const id = decodeURIComponent(window.location.hash.replace(/^#/, ''));
    if (!id || !token()) return;
    const res = await getJSON(apiURL('decisions/' + encodeURIComponent(id)));
    if (res.status !== 200 || !res.body || !res.body.event) {
      showError(res);
      return;
    }
    showDetail(res.body);
  }

  function init() {
    window.LushUI.tokenForm(() => search(false), showError);
    $('filter-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      search(false);
    });
    $('reset').addEventListener('click', () => {
      for (const name of FILTERS) $('f-' + name).value = '';
      $('f-limit').value = '100';
    });
    $('older').addEventListener('click', () => search(true));
    $('d-close').addEventListener('click', () => {
      $('detail').hidden = true;
      window.history.replaceState(null, '', window.location.pathname + window.location.search);
    });
    window.addEventListener('hashchange', openFromHash);
    // Filters in the page's query (links from the other pages: ./?principal=…) fill the form.
    const preset = new URLSearchParams(window.location.search);
    for (const name of FILTERS) {
      const v = preset.get(name);
      if (v !== null) $('f-' + name).value = v;
    }
    if (token()) {
      search(false);
      openFromHash();
    }
  }

  window.LushUI.ready(init);
})();
