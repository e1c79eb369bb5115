// The UI's link to the Lush API, shared by its pages (the decision log, approvals): the bearer
// token kept for this browser tab, authenticated JSON requests, and DOM helpers that only ever
// put text on the page (textContent, never HTML), so a logged value such as
// <img src=x onerror=…> is shown as the text it is.
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

  function ready(init) {
    if (document.readyState === 'loading') {
      document.addEventListener('DOMContentLoaded', init);
    } else {
      init();
    }
  }

  return { token, el, clear, pretty, when, request, showError, hideError, tokenForm, ready };
})();
