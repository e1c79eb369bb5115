// The console's overview: decisions over time by outcome (a stacked bar chart drawn as SVG by
// this script), the most denied rules, principals and tools, the live writes, the revisions
// that decided and the log's health, from GET /audit/stats. Every value goes on the page as
// text or as an SVG attribute holding a number.
'use strict';

(function () {
  const { el, clear, when, term, svg, searchLink } = window.LushUI;
  const $ = (id) => document.getElementById(id);
  const OUTCOMES = ['allow', 'stub', 'approval_required', 'deny', 'error'];
  const COLORS = { allow: '#1b7f3b', stub: '#c9a100', approval_required: '#6b3fa0', deny: '#a4161a', error: '#5c6370' };

  function showError(res) {
    window.LushUI.showError($('error'), res, 'Enter the bearer token (API key or JWT) of a principal that holds the audit role in lush.yaml roles.');
  }

  // chart draws the buckets as stacked bars, one colour per outcome; each bar's rect carries its
  // outcome and count (data-outcome, data-count) and a title to read on hover.
  function chart(o) {
    const W = 960, H = 200, left = 48, bottom = 24, top = 8;
    const n = o.buckets.length;
    let most = 1;
    for (const b of o.buckets) {
      let sum = 0;
      for (const k of OUTCOMES) sum += b.counts[k] || 0;
      most = Math.max(most, sum);
    }
    const root = svg('svg', { viewBox: `0 0 ${W} ${H}`, width: '100%', role: 'img', 'aria-labelledby': 'chart-title', class: 'chart' });
    root.appendChild(svg('title', { id: 'chart-title' }, 'Decisions per ' + o.bucket + ' by outcome, most in one bucket: ' + most));
    const plotH = H - bottom - top;
    const bw = (W - left) / n;
    root.appendChild(svg('line', { x1: left, y1: top + plotH, x2: W, y2: top + plotH, stroke: '#5c6370' }));
    root.appendChild(svg('text', { x: left - 6, y: top + 10, 'text-anchor': 'end', class: 'axis' }, most));
    root.appendChild(svg('text', { x: left - 6, y: top + plotH, 'text-anchor': 'end', class: 'axis' }, 0));
    o.buckets.forEach((b, i) => {
      let y = top + plotH;
      for (const k of OUTCOMES) {
        const c = b.counts[k] || 0;
        if (!c) continue;
        const h = (c / most) * plotH;
        y -= h;
        const r = svg('rect', { x: left + i * bw + 1, y: y, width: Math.max(bw - 2, 1), height: h, fill: COLORS[k], class: 'bar',
          'data-outcome': k, 'data-count': c, 'data-bucket': i });
        r.appendChild(svg('title', {}, when(b.start) + ': ' + c + ' ' + k));
        root.appendChild(r);
      }
    });
    for (const i of [0, Math.floor(n / 2), n - 1]) {
      if (i < 0 || i >= n) continue;
      root.appendChild(svg('text', { x: left + i * bw, y: H - 6, class: 'axis' }, when(o.buckets[i].start).slice(0, 16)));
    }
    return root;
  }

  function window_(o) {
    return { since: o.since, until: o.until };
  }

  function topList(list, items, filters) {
    clear(list);
    for (const it of items) {
      const li = el('li');
      li.appendChild(searchLink(filters(it), it.key));
      li.appendChild(el('span', ' — ' + it.count, 'count'));
      li.dataset.key = it.key;
      li.dataset.count = it.count;
      list.appendChild(li);
    }
    if (!items.length) list.appendChild(el('li', 'none', 'note'));
  }

  function render(o) {
    const w = window_(o);
    $('window').textContent = when(o.since) + ' to ' + when(o.until) + ' UTC, in buckets of ' + o.bucket;
    $('overview').dataset.since = o.since;
    $('overview').dataset.until = o.until;
    const c = $('chart');
    clear(c);
    c.appendChild(chart(o));
    const rows = $('total-rows');
    clear(rows);
    for (const k of OUTCOMES) {
      const tr = el('tr');
      tr.dataset.outcome = k;
      const name = el('td');
      const sw = svg('svg', { width: 12, height: 12, 'aria-hidden': 'true' });
      sw.appendChild(svg('rect', { width: 12, height: 12, fill: COLORS[k] }));
      name.appendChild(sw);
      name.appendChild(document.createTextNode(' ' + k));
      tr.appendChild(name);
      tr.appendChild(el('td', o.totals[k] || 0, 'num'));
      const td = el('td');
      td.appendChild(searchLink(Object.assign({ outcome: k }, w), 'search'));
      tr.appendChild(td);
      rows.appendChild(tr);
    }
    topList($('top-rules'), o.top_denied_rules, () => Object.assign({ outcome: 'deny' }, w)); // the search has no rule filter: all denials of the window
    topList($('top-principals'), o.top_denied_principals, (it) => Object.assign({ outcome: 'deny', principal: it.key }, w));
    topList($('top-tools'), o.top_denied_tools, (it) => Object.assign({ outcome: 'deny', tool: it.tool }, w));
    const lw = $('live-writes');
    clear(lw);
    lw.appendChild(el('strong', o.live_writes));
    lw.appendChild(document.createTextNode(' writes ran for real (allowed, not stubbed) — '));
    lw.appendChild(searchLink(Object.assign({ outcome: 'live_write' }, w), 'search them'));
    topList($('top-writes'), o.top_live_write_tools, (it) => Object.assign({ outcome: 'live_write', tool: it.tool }, w));
    const rev = $('revision-rows');
    clear(rev);
    for (const r of o.revisions) {
      const tr = el('tr');
      const td = el('td');
      td.appendChild(searchLink(Object.assign({ revision: r.revision }, w), r.revision.slice(0, 12)));
      tr.appendChild(td);
      tr.appendChild(el('td', when(r.first)));
      tr.appendChild(el('td', when(r.last)));
      tr.appendChild(el('td', r.decisions, 'num'));
      rev.appendChild(tr);
    }
    const health = $('health-rows');
    clear(health);
    for (const p of o.health.partitions) {
      const tr = el('tr');
      tr.appendChild(el('td', p.partition));
      tr.appendChild(el('td', p.head, 'num'));
      const ck = p.last_checkpoint;
      tr.appendChild(el('td', ck ? 'position ' + ck.pos + ' at ' + when(ck.timestamp) + (ck.key_id ? ', signed by ' + ck.key_id : ', unsigned') : 'none yet'));
      tr.appendChild(el('td', p.unprotected + (p.unprotected === 1 ? ' entry' : ' entries'), p.unprotected ? 'warn' : ''));
      health.appendChild(tr);
    }
    const wr = $('writes');
    clear(wr);
    const s = o.health.writes;
    if (s) {
      term(wr, 'Written since start', s.written);
      term(wr, 'Write failures', String(s.failed));
      term(wr, 'Refused (invalid, queue full)', String(s.rejected));
      term(wr, 'Queued', String(s.queued));
      term(wr, 'Checkpoint and retention failures', String(s.maintenance_failures));
    } else {
      term(wr, 'Write counters', 'not kept here: this server reads a log another process writes');
    }
    $('overview').hidden = false;
  }

  async function load() {
    const p = new URLSearchParams({ since: $('w-since').value });
    if ($('w-bucket').value) p.set('bucket', $('w-bucket').value);
    $('status').textContent = 'Loading…';
    const res = await window.LushUI.getJSON('audit/stats?' + p.toString());
    if (res.status !== 200 || !res.body || !Array.isArray(res.body.buckets)) {
      showError(res);
      $('status').textContent = 'The overview could not be read.';
      return;
    }
    window.LushUI.hideError($('error'));
    render(res.body);
    $('status').textContent = 'This look is decision ' + res.decisionID + '.';
  }

  function init() {
    window.LushUI.tokenForm(load, showError);
    $('window-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      load();
    });
    if (window.LushUI.token()) load();
  }

  window.LushUI.ready(init);
})();
