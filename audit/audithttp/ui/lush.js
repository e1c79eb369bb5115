// The console's shell and its link to the Lush API, shared by every page: the nav bar, the
// sign-in box, the bearer token kept for this browser tab, authenticated JSON requests to the
// page's own origin (relative URLs only), and DOM helpers that only ever put text on the page
// (textContent, never HTML), so a logged value such as <img src=x onerror=…> is shown as the
// text it is.
'use strict';

window.LushUI = (function () {
  const TOKEN_KEY = 'lush.audit.token';

  function token() {
    try {
      return window.sessionStorage.getItem(TOKEN_KEY) || '';
    } catch (e) {
      return '';
    }
  }

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  function pretty(v) {
    if (v === undefined || v === null) return '(none)';
    try {
      return JSON.stringify(v, null, 2);
    } catch (e) {
      return String(v);
    }
  }

  function when(ts) {
    const d = new Date(ts);
    return isNaN(d.getTime()) ? String(ts || '') : d.toISOString().replace('T', ' ').replace('Z', '');
  }

  // request sends a request with the token and returns {status, body, decisionID}; a network
  // failure is status 0 with an error body.
  async function request(url, method, body) {
    const headers = { Accept: 'application/json' };
    const t = token();
    if (t) headers.Authorization = 'Bearer ' + t;
    const init = { method: method || 'GET', headers: headers, credentials: 'omit', cache: 'no-store', redirect: 'error' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(url, init);
    } catch (e) {
      return { status: 0, body: { error: { code: 'network', message: 'the server cannot be reached: ' + e.message } } };
    }
    let out = null;
    try {
      out = await resp.json();
    } catch (e) {
      out = null;
    }
    return { status: resp.status, body: out, decisionID: resp.headers.get('X-Lush-Decision-Id') || '' };
  }

  // showError puts an API error in box: its status and code, its message and, for a decision
  // that refused the request, the decision id (to look up in the log); hint401 is shown on 401.
  function showError(box, res, hint401) {
    clear(box);
    const err = (res.body && res.body.error) || {};
    box.appendChild(el('strong', (res.status ? res.status + ' ' : '') + (err.code || 'error'), 'error-code'));
    box.appendChild(el('span', ': ' + (err.message || 'the request failed'), 'error-message'));
    const id = err.decision_id || res.decisionID;
    if (id && res.status !== 200) {
      box.appendChild(el('span', ' — decision '));
      box.appendChild(el('code', id, 'error-decision'));
    }
    if (res.status === 401 && hint401) box.appendChild(el('p', hint401));
    box.hidden = false;
  }

  function hideError(box) {
    clear(box);
    box.hidden = true;
  }

  // tokenForm wires the page's token form (#token-form, #token, #token-clear, #token-state):
  // onSet runs after a token is kept, onError gets a storage failure.
  function tokenForm(onSet, onError) {
    const $ = (id) => document.getElementById(id);
    const show = () => {
      $('token-state').textContent = token() ? 'a token is set for this tab' : 'no token set';
    };
    show();
    $('token-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const t = $('token').value.trim();
      $('token').value = '';
      try {
        if (t) window.sessionStorage.setItem(TOKEN_KEY, t);
      } catch (e) {
        onError({ status: 0, body: { error: { code: 'storage', message: 'this browser keeps no session storage: ' + e.message } } });
        return;
      }
      show();
      onSet();
    });
    $('token-clear').addEventListener('click', () => {
      try {
        window.sessionStorage.removeItem(TOKEN_KEY);
      } catch (e) {
        // nothing to forget
      }
      show();
    });
  }

  // The console's pages, in the nav bar's order: [file, label].
  const PAGES = [
    ['overview.html', 'Overview'],
    ['./', 'Decisions'],
    ['approvals.html', 'Approvals'],
    ['graph.html', 'Graph'],
    ['review.html', 'Access review'],
    ['replay.html', 'Replay'],
    ['playground.html', 'Playground'],
  ];

  // nav fills <nav id="nav"> with the console's pages as a list of links, the current one marked.
  function nav() {
    const box = document.getElementById('nav');
    if (!box) return;
    clear(box);
    box.setAttribute('aria-label', 'Console');
    const here = window.location.pathname.replace(/.*\//, '') || './';
    const ul = el('ul');
    for (const [href, label] of PAGES) {
      const a = el('a', label);
      a.href = href;
      if (href === here || (href === './' && here === 'index.html')) a.setAttribute('aria-current', 'page');
      const li = el('li');
      li.appendChild(a);
      ul.appendChild(li);
    }
    box.appendChild(ul);
  }

  // signInBox builds the sign-in form in <section id="auth"> (once, the same on every page);
  // the section's data-placeholder says whose token the page wants.
  function signInBox() {
    const box = document.getElementById('auth');
    if (!box || document.getElementById('token-form')) return;
    const form = el('form');
    form.id = 'token-form';
    form.autocomplete = 'off';
    const label = el('label', 'Bearer token');
    label.htmlFor = 'token';
    const input = el('input');
    input.id = 'token';
    input.name = 'token';
    input.type = 'password';
    input.spellcheck = false;
    input.placeholder = box.dataset.placeholder || 'API key or JWT of a principal with the audit role';
    const save = el('button', 'Use token');
    save.id = 'token-save';
    save.type = 'submit';
    const forget = el('button', 'Forget token');
    forget.id = 'token-clear';
    forget.type = 'button';
    const state = el('span', '', 'note');
    state.id = 'token-state';
    for (const n of [label, input, save, forget, state]) form.appendChild(n);
    box.appendChild(form);
  }

  // api is the URL of an API path ("audit/stats?…") on the page's own origin, relative to the
  // console's directory (so it also works under a proxy's prefix). Leading slashes are dropped,
  // so no path can name another host; a URL off the origin is refused all the same: the token
  // goes nowhere else.
  function api(rel) {
    const u = new URL('../' + String(rel).replace(/^\/+/, ''), window.location.href);
    if (u.origin !== window.location.origin) throw new Error('refusing a request to another origin: ' + u.origin);
    return u;
  }

  async function getJSON(rel) {
    return request(api(rel), 'GET');
  }

  // link returns an <a> with text (never HTML) to a page of the console.
  function link(href, text, cls) {
    const a = el('a', text, cls);
    a.href = href;
    return a;
  }

  // searchLink links to the decision search with filters ({principal: …}).
  function searchLink(filters, text) {
    return link('./?' + new URLSearchParams(filters).toString(), text);
  }

  // svg creates an SVG element with attributes (numbers and text only; never markup).
  function svg(tag, attrs, text) {
    const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  // term adds a name and value to a <dl>, unless the value is empty.
  function term(dl, name, value) {
    if (value === undefined || value === null || value === '' || (Array.isArray(value) && value.length === 0)) return;
    dl.appendChild(el('dt', name));
    const dd = el('dd');
    if (value instanceof Node) dd.appendChild(value);
    else dd.textContent = Array.isArray(value) ? value.join(', ') : String(value);
    dl.appendChild(dd);
  }

  // ready runs init once the page is parsed, after the shell (nav bar, sign-in box) is built.
  function ready(init) {
    const start = () => {
      nav();
      signInBox();
      init();
    };
    if (document.readyState === 'loading') {
      document.addEventListener('DOMContentLoaded', start);
    } else {
      start();
    }
  }

  return { token, el, clear, pretty, when, request, showError, hideError, tokenForm, ready, nav, api, getJSON, link, searchLink, svg, term };
})();

// console-b: helpers of the build pages (graph, access review, replay, playground).
(function (ui) {
  // buildPicker fills select with the kept builds (GET /audit/builds), the serving one first
  // selected (or the deployed, or the newest), and returns the list; null after showing an error
  // in box. withNone adds a first option "" labelled withNone.
  ui.buildPicker = async function (select, box, withNone) {
    const res = await ui.request(new URL('../audit/builds', window.location.href), 'GET');
    if (res.status !== 200 || !res.body || !Array.isArray(res.body.builds)) {
      ui.showError(box, res, 'Enter the bearer token (API key or JWT) of a principal that holds the audit role in lush.yaml roles.');
      return null;
    }
    const keep = select.value;
    ui.clear(select);
    if (withNone) select.appendChild(new Option(withNone, ''));
    for (const b of res.body.builds) {
      const tags = [];
      if (b.serving) tags.push('serving');
      if (b.deployed) tags.push('deployed');
      const label = String(b.hash).slice(0, 12) + ' ' + ui.when(b.built_at) + (tags.length ? ' (' + tags.join(', ') + ')' : '');
      select.appendChild(new Option(label, b.hash));
    }
    const pick = res.body.builds.find((b) => b.hash === keep) || res.body.builds.find((b) => b.serving) ||
      res.body.builds.find((b) => b.deployed) || res.body.builds[0];
    if (pick && !withNone) select.value = pick.hash;
    if (keep && res.body.builds.some((b) => b.hash === keep)) select.value = keep;
    return res.body.builds;
  };

  // download fetches url from this page's own origin with the bearer token (never a token in
  // a URL) and saves the answer as filename through a Blob. It returns the request's result.
  ui.download = async function (url, accept, filename) {
    const headers = { Accept: accept };
    const t = ui.token();
    if (t) headers.Authorization = 'Bearer ' + t;
    let resp;
    try {
      resp = await fetch(url, { headers: headers, credentials: 'omit', cache: 'no-store', redirect: 'error' });
    } catch (e) {
      return { status: 0, body: { error: { code: 'network', message: 'the server cannot be reached: ' + e.message } } };
    }
    if (resp.status !== 200) {
      let body = null;
      try { body = await resp.json(); } catch (e) { body = null; }
      return { status: resp.status, body: body, decisionID: resp.headers.get('X-Lush-Decision-Id') || '' };
    }
    const blob = await resp.blob();
    const href = URL.createObjectURL(blob);
    const a = document.createElement('a');
    a.href = href;
    a.download = filename;
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(href), 60000);
    return { status: 200, decisionID: resp.headers.get('X-Lush-Decision-Id') || '' };
  };

  // rowKeys makes a table row reachable and usable by keyboard: focusable, Enter or Space
  // runs open, as a click does.
  ui.rowKeys = function (tr, open) {
    tr.tabIndex = 0;
    tr.addEventListener('click', open);
    tr.addEventListener('keydown', (ev) => {
      if (ev.key === 'Enter' || ev.key === ' ') {
        ev.preventDefault();
        open();
      }
    });
  };
})(window.LushUI);
