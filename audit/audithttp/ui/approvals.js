// The Lush approvals page: the calls that wait for a person, with the call's (masked) arguments
// and why the policy asks, and, for pending ones, Approve and Deny with a reason. Everything from
// the server is put on the page as text.
'use strict';

(function () {
  const { el, clear, pretty, when } = window.LushUI;
  const $ = (id) => document.getElementById(id);
  // Relative to the page (/ui/approvals.html), so the page also works under a proxy's prefix.
  const apiURL = (rel) => new URL('../approvals' + rel, window.location.href);

  function showError(res) {
    window.LushUI.showError($('error'), res, 'Enter the bearer token (API key or JWT) of a principal that holds the approve (or audit) role in lush.yaml roles.');
  }

  function term(dl, name, value) {
    if (value === undefined || value === null || value === '') return;
    dl.appendChild(el('dt', name));
    dl.appendChild(el('dd', value));
  }

  function card(ap) {
    const box = el('article', null, 'approval status-' + String(ap.status || '').replace(/[^a-z_]/g, ''));
    box.dataset.id = ap.id || '';
    const h = el('h2');
    h.appendChild(el('span', ap.status, 'outcome'));
    h.appendChild(document.createTextNode(' '));
    h.appendChild(el('code', ap.id, 'id'));
    box.appendChild(h);
    const dl = el('dl');
    term(dl, 'Call', (ap.tool || '') + (ap.tool_name ? ' (' + ap.tool_name + ')' : ''));
    term(dl, 'Principal', ap.principal);
    term(dl, 'Agent', ap.agent);
    term(dl, 'Asked (UTC)', when(ap.created));
    term(dl, 'Expires (UTC)', when(ap.expires));
    term(dl, 'Decided by', ap.decided_by);
    term(dl, 'Decided (UTC)', ap.decided_at ? when(ap.decided_at) : '');
    term(dl, 'Reason given', ap.reason);
    term(dl, 'Ran as decision', ap.used_by);
    box.appendChild(dl);
    const reasons = el('ul', null, 'reasons');
    for (const r of Array.isArray(ap.reasons) ? ap.reasons : []) {
      const li = el('li');
      li.appendChild(el('code', r.rule));
      li.appendChild(document.createTextNode(': ' + r.message));
      reasons.appendChild(li);
    }
    box.appendChild(el('h3', 'Why it needs approval'));
    box.appendChild(reasons);
    box.appendChild(el('h3', 'Arguments (as logged, masked by the policy)'));
    box.appendChild(el('pre', pretty(ap.arguments), 'arguments'));
    if (ap.status === 'pending') {
      const form = el('form', null, 'decide');
      form.autocomplete = 'off';
      const label = el('label', 'Reason');
      const reason = el('input', null, 'reason');
      reason.maxLength = 2000;
      reason.placeholder = 'kept in the decision log; a denial\u2019s reason is shown to the model';
      label.appendChild(reason);
      form.appendChild(label);
      const approve = el('button', 'Approve', 'approve');
      approve.type = 'button';
      const deny = el('button', 'Deny', 'deny');
      deny.type = 'button';
      approve.addEventListener('click', () => decide(ap.id, 'approve', reason.value));
      deny.addEventListener('click', () => decide(ap.id, 'deny', reason.value));
      form.addEventListener('submit', (ev) => ev.preventDefault());
      form.appendChild(approve);
      form.appendChild(deny);
      box.appendChild(form);
    }
    return box;
  }

  async function load() {
    const status = $('f-status').value;
    $('status').textContent = 'Loading…';
    const res = await window.LushUI.request(apiURL('?status=' + encodeURIComponent(status)), 'GET');
    if (res.status !== 200 || !res.body || !Array.isArray(res.body.approvals)) {
      showError(res);
      $('status').textContent = 'The approvals could not be read.';
      return;
    }
    window.LushUI.hideError($('error'));
    const list = $('approvals');
    clear(list);
    for (const ap of res.body.approvals) list.appendChild(card(ap));
    const n = res.body.approvals.length;
    $('status').textContent = (n === 0 ? 'No ' + status + ' approvals.' : n + (n === 1 ? ' approval.' : ' approvals.')) +
      ' (This look is decision ' + res.decisionID + '.)';
  }

  async function decide(id, decision, reason) {
    const res = await window.LushUI.request(apiURL('/' + encodeURIComponent(id)), 'POST', { decision: decision, reason: reason.trim() });
    if (res.status !== 200 || !res.body) {
      showError(res);
      return;
    }
    await load();
    $('status').textContent = 'Approval ' + id + ' ' + res.body.status + ' (decision ' + res.decisionID + '). ' + $('status').textContent;
  }

  function init() {
    window.LushUI.tokenForm(load, showError);
    $('filter-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      load();
    });
    if (window.LushUI.token()) load();
  }

  window.LushUI.ready(init);
})();
