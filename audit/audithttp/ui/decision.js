// A decision's page (decision.html#<id>): the logged record (GET /audit/decisions/{id}) and its
// context (GET /audit/decisions/{id}/context): the rules that decided with their descriptions and
// policy file:line, the completion, the chain position, and links to the same principal's,
// agent's and tool's decisions. Everything from the server is put on the page as text.
'use strict';

(function () {
  const { el, clear, pretty, when, term, link, searchLink } = window.LushUI;
  const $ = (id) => document.getElementById(id);

  function showError(res) {
    window.LushUI.showError($('error'), res, 'Enter the bearer token (API key or JWT) of a principal that holds the audit role in lush.yaml roles.');
  }

  function ms(ns) {
    return typeof ns === 'number' ? (ns / 1e6).toFixed(3) + ' ms' : '';
  }

  // entryLink names a chain entry, linking to its decision's page.
  function entry(e) {
    if (!e) return 'none (the start of what is kept, or not written yet)';
    const span = el('span');
    span.appendChild(document.createTextNode('position ' + e.pos + ', ' + e.kind + ' '));
    if (e.decision_id) span.appendChild(link('decision.html#' + encodeURIComponent(e.decision_id), e.decision_id, 'chain-link'));
    return span;
  }

  function renderRecord(rec) {
    const e = rec.event || {};
    $('d-id').textContent = e.decision_id || '';
    document.title = 'Lush decision ' + (e.decision_id || '');
    const sum = $('summary');
    clear(sum);
    term(sum, 'Time (UTC)', when(e.timestamp));
    term(sum, 'Outcome', e.outcome);
    term(sum, 'Action', e.action);
    term(sum, 'Principal', e.principal);
    term(sum, 'Groups', e.groups);
    term(sum, 'Agent', e.agent);
    term(sum, 'Chain of agents', e.chain);
    term(sum, 'Tool', e.tool ? e.tool + (e.tool_name ? ' (' + e.tool_name + ')' : '') : '');
    term(sum, 'Access', e.access);
    term(sum, 'Risk', e.risk);
    term(sum, 'Enforcement point', e.enforcement_point);
    term(sum, 'Bundle revision', e.revision);
    term(sum, 'Environment', e.environment);
    term(sum, 'Decision latency', ms(e.latency_ns));
    term(sum, 'Error', e.error);
    term(sum, 'Erased from the input', e.erased);
    term(sum, 'Masked in the input', e.masked);
    term(sum, 'Belongs to decision', e.parent_id ? link('decision.html#' + encodeURIComponent(e.parent_id), e.parent_id) : '');
    term(sum, 'Trace', e.trace_id ? link('trace.html#' + encodeURIComponent(e.trace_id), e.trace_id, 'trace-link') : '');
    term(sum, 'Log sequence', rec.seq);

    const nb = $('neighbours');
    clear(nb);
    const add = (filters, text) => {
      const li = el('li');
      li.appendChild(searchLink(filters, text));
      nb.appendChild(li);
    };
    if (e.principal) add({ principal: e.principal }, 'Decisions of ' + e.principal);
    if (e.agent) add({ agent: e.agent }, 'Decisions about agent ' + e.agent);
    if (e.tool) add({ tool: e.tool }, 'Decisions about tool ' + e.tool);
    if (e.principal && e.tool) add({ principal: e.principal, tool: e.tool }, e.principal + ' calling ' + e.tool);

    $('input').textContent = pretty(e.input);
    $('result').textContent = pretty(e.result);
    const comp = $('completion');
    clear(comp);
    const resp = $('response');
    resp.hidden = true;
    const c = rec.completion;
    if (c) {
      term(comp, 'Status', c.status);
      term(comp, 'Upstream latency', ms(c.upstream_latency_ns));
      term(comp, 'At (UTC)', when(c.timestamp));
      term(comp, 'Error', c.error);
      term(comp, 'Tokens in / out', c.tokens_input || c.tokens_output ? (c.tokens_input || 0) + ' / ' + (c.tokens_output || 0) : '');
      if (c.response !== undefined && c.response !== null) {
        resp.textContent = pretty(c.response);
        resp.hidden = false;
      }
    } else {
      term(comp, 'None', 'a denied decision has none; an allowed call gets one when it ends');
    }
  }

  function renderContext(ctx) {
    const rows = $('rule-rows');
    clear(rows);
    for (const r of ctx.rules || []) {
      const tr = el('tr');
      tr.dataset.rule = r.id;
      tr.dataset.roles = (r.roles || []).join(' ');
      tr.tabIndex = 0;
      tr.appendChild(el('td', r.id, 'rule-id'));
      tr.appendChild(el('td', (r.roles || []).join(', ')));
      const d = el('td');
      if (r.title) d.appendChild(el('strong', r.title, 'rule-title'));
      if (r.description) d.appendChild(el('p', r.description, 'rule-description'));
      if (!r.title && !r.description) d.appendChild(el('span', r.known ? '(no METADATA)' : '(not described by this build)', 'note'));
      tr.appendChild(d);
      tr.appendChild(el('td', r.file ? r.file + ':' + r.line : '', 'rule-location'));
      const msgs = el('td');
      for (const m of r.messages || []) msgs.appendChild(el('p', m, 'rule-message'));
      tr.appendChild(msgs);
      rows.appendChild(tr);
    }
    if (!rows.firstChild) rows.appendChild(el('tr')).appendChild(el('td', '(none)'));
    const note = $('rules-note');
    note.textContent = ctx.rules_note || '';
    note.hidden = !ctx.rules_note;
    const chain = $('chain');
    clear(chain);
    const p = ctx.chain;
    if (!p) {
      term(chain, 'Position', 'not known to this server');
      return;
    }
    term(chain, 'Partition', p.partition);
    term(chain, 'Position', String(p.entry.pos));
    term(chain, 'Hash', p.entry.hash);
    term(chain, 'Previous entry', entry(p.previous));
    term(chain, 'Next entry', entry(p.next));
    term(chain, 'Completion entry', p.completion ? 'position ' + p.completion.pos : 'none');
    term(chain, 'Covered by checkpoint', p.checkpoint ? 'position ' + p.checkpoint.pos + ' at ' + when(p.checkpoint.timestamp) +
      (p.checkpoint.key_id ? ', signed by key ' + p.checkpoint.key_id : ', unsigned') : 'none yet: the unprotected tail (lushctl audit verify counts it)');
  }

  async function load() {
    const id = decodeURIComponent(window.location.hash.replace(/^#/, ''));
    if (!id) {
      $('status').textContent = 'Name a decision after # in the address (decision.html#<id>), or open one from the search.';
      return;
    }
    $('status').textContent = 'Loading…';
    const path = 'audit/decisions/' + encodeURIComponent(id);
    const [rec, ctx] = await Promise.all([window.LushUI.getJSON(path), window.LushUI.getJSON(path + '/context')]);
    for (const res of [rec, ctx]) {
      if (res.status !== 200 || !res.body) {
        showError(res);
        $('status').textContent = 'The decision could not be read.';
        return;
      }
    }
    window.LushUI.hideError($('error'));
    renderRecord(rec.body);
    renderContext(ctx.body);
    $('decision').hidden = false;
    $('status').textContent = 'These reads are decisions ' + rec.decisionID + ' and ' + ctx.decisionID + '.';
  }

  function init() {
    window.LushUI.tokenForm(load, showError);
    window.addEventListener('hashchange', load);
    if (window.LushUI.token()) load();
  }

  window.LushUI.ready(init);
})();
