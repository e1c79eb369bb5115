// A trace's page (trace.html#<trace id>): an agent invocation as a waterfall, from
// GET /audit/traces/{id}. Spans are nested under their parents (a child invocation through
// lush:// or A2A sits under the tool call and gateway call that made it), each drawn as a bar
// whose offset and length are proportional to its start and duration within the trace. Tool
// calls link to their decisions. Everything from the server is put on the page as text.
'use strict';

(function () {
  const { el, clear, when, term, link, svg } = window.LushUI;
  const $ = (id) => document.getElementById(id);

  function showError(res) {
    window.LushUI.showError($('error'), res, 'Enter the bearer token (API key or JWT) of a principal that holds the audit role in lush.yaml roles.');
  }

  // kind names what a span is, from its name: an invocation, a model turn, an agent's tool
  // call, the gateway's side of a call, or something else.
  function kind(s) {
    const n = String(s.name || '');
    if (n.startsWith('invoke_agent ')) return 'invocation';
    if (n.startsWith('chat ')) return 'model turn';
    if (n.startsWith('tool ')) return 'tool call';
    if (n.startsWith('tools/call')) return 'gateway call';
    return 'span';
  }

  function details(s) {
    const a = s.attributes || {};
    const parts = [];
    const tokens = a['lush.tokens.input'] !== undefined ? 'tokens ' + (a['lush.tokens.input'] || 0) + ' in / ' + (a['lush.tokens.output'] || 0) + ' out' : '';
    switch (kind(s)) {
      case 'invocation':
        parts.push('agent ' + (a['lush.agent'] || ''), 'as ' + (a['lush.principal'] || ''), a['lush.model'] || '', tokens, a['lush.status'] ? 'status ' + a['lush.status'] : '');
        break;
      case 'model turn':
        parts.push('turn ' + (a['lush.turn'] || ''), tokens, a['lush.tool_calls'] !== undefined ? a['lush.tool_calls'] + ' tool calls' : '');
        break;
      case 'tool call':
      case 'gateway call':
        parts.push(a['lush.tool'] || '', a['lush.tool.name'] ? '(' + a['lush.tool.name'] + ')' : '', a['lush.access'] || '',
          a['lush.status'] ? 'outcome ' + a['lush.status'] : '');
        break;
    }
    if (s.status === 'error') parts.push('error' + (s.status_message ? ': ' + s.status_message : ''));
    return parts.filter((p) => p).join(' · ');
  }

  // tree orders spans depth first, children by start; spans whose parent is missing are roots.
  function tree(spans) {
    const byID = new Map(spans.map((s) => [s.span_id, s]));
    const kids = new Map();
    const roots = [];
    for (const s of spans) {
      if (s.parent_span_id && byID.has(s.parent_span_id)) {
        if (!kids.has(s.parent_span_id)) kids.set(s.parent_span_id, []);
        kids.get(s.parent_span_id).push(s);
      } else {
        roots.push(s);
      }
    }
    const byStart = (a, b) => new Date(a.start) - new Date(b.start);
    const out = [];
    const walk = (s, depth) => {
      out.push({ span: s, depth: depth });
      for (const c of (kids.get(s.span_id) || []).sort(byStart)) walk(c, depth + 1);
    };
    for (const r of roots.sort(byStart)) walk(r, 0);
    return out;
  }

  function render(t) {
    const spans = Array.isArray(t.spans) ? t.spans : [];
    const sum = $('t-summary');
    clear(sum);
    term(sum, 'Agent', t.agent);
    term(sum, 'Principal', t.principal);
    term(sum, 'Model', t.model);
    term(sum, 'Status', t.status);
    const tk = t.tokens || {};
    term(sum, 'Tokens in / out', tk.input || tk.output ? (tk.input || 0) + ' / ' + (tk.output || 0) : '');
    term(sum, 'Spans', String(spans.length));
    let t0 = Infinity, t1 = -Infinity;
    for (const s of spans) {
      t0 = Math.min(t0, new Date(s.start).getTime());
      t1 = Math.max(t1, new Date(s.end).getTime());
    }
    const total = Math.max(t1 - t0, 1);
    term(sum, 'Started (UTC)', isFinite(t0) ? when(new Date(t0).toISOString()) : '');
    term(sum, 'Duration', isFinite(t0) ? (t1 - t0).toFixed(1) + ' ms' : '');
    const body = $('steps');
    clear(body);
    for (const { span: s, depth } of tree(spans)) {
      const a = s.attributes || {};
      const tr = el('tr', null, 'step kind-' + kind(s).replace(' ', '-'));
      tr.tabIndex = 0;
      tr.dataset.spanId = s.span_id;
      tr.dataset.parent = s.parent_span_id || '';
      tr.dataset.depth = depth;
      tr.dataset.kind = kind(s);
      const name = el('td', null, 'step-name');
      name.appendChild(el('span', '\u2003'.repeat(depth), 'indent'));
      name.appendChild(el('span', kind(s), 'kind'));
      name.appendChild(el('span', ' ' + s.name, 'name'));
      tr.appendChild(name);
      tr.appendChild(el('td', details(s), 'details'));
      const dec = el('td');
      if (a['lush.decision_id']) {
        dec.appendChild(link('decision.html#' + encodeURIComponent(a['lush.decision_id']), a['lush.decision'] || 'decision', 'decision-link'));
      } else if (a['lush.invocation_id']) {
        dec.appendChild(link('decision.html#' + encodeURIComponent(a['lush.invocation_id']), a['lush.decision'] || 'decision', 'decision-link'));
      }
      tr.appendChild(dec);
      tr.appendChild(el('td', typeof s.duration_ms === 'number' ? s.duration_ms.toFixed(1) + ' ms' : '', 'num'));
      const tl = el('td', null, 'timeline');
      const start = new Date(s.start).getTime() - t0;
      const x = (start / total) * 100;
      const w = Math.max(((new Date(s.end).getTime() - new Date(s.start).getTime()) / total) * 100, 0.3);
      const bar = svg('svg', { width: '100%', height: 14, class: 'bar-track', 'aria-hidden': 'true' });
      bar.appendChild(svg('rect', { x: x.toFixed(3) + '%', y: 2, width: w.toFixed(3) + '%', height: 10, class: 'span-bar ' + (s.status === 'error' ? 'error' : kind(s).replace(' ', '-')),
        'data-offset': x.toFixed(3), 'data-width': w.toFixed(3) }));
      tl.appendChild(bar);
      tr.appendChild(tl);
      body.appendChild(tr);
    }
    $('trace').hidden = false;
  }

  async function load() {
    const id = decodeURIComponent(window.location.hash.replace(/^#/, ''));
    $('t-id').textContent = id;
    if (!id) {
      $('status').textContent = 'Name a trace after # in the address (trace.html#<trace id>), or open one from a decision.';
      return;
    }
    $('status').textContent = 'Loading…';
    const res = await window.LushUI.getJSON('audit/traces/' + encodeURIComponent(id));
    if (res.status !== 200 || !res.body) {
      showError(res);
      $('status').textContent = 'The trace could not be read.';
      return;
    }
    window.LushUI.hideError($('error'));
    render(res.body);
    $('status').textContent = 'This read is decision ' + res.decisionID + '.';
  }

  function init() {
    window.LushUI.tokenForm(load, showError);
    window.addEventListener('hashchange', load);
    if (window.LushUI.token()) load();
  }

  window.LushUI.ready(init);
})();
