// The Lush graph page: a build's derived graph of who may call whom (GET
// /audit/builds/{hash}/graph), drawn as SVG in columns (principals, loops, agents, tools), and,
// for a selected principal, what it reaches through which agents with the grants that give it
// (the build's access review, GET /audit/builds/{hash}/review: the policy's own answers).
// Everything from the server is put on the page as text.
'use strict';

(function () {
  const ui = window.LushUI;
  const { el, clear } = ui;
  const $ = (id) => document.getElementById(id);
  const api = (rel) => new URL('../audit' + rel, window.location.href);
  const SVG = 'http://www.w3.org/2000/svg';
  const COLUMNS = ['principal', 'loop', 'agent', 'tool'];
  const W = 180, H = 28, GAP_X = 64, GAP_Y = 12, PAD = 16;
  const ENDS = { invokes: ['principal', 'agent'], calls: ['agent', 'agent'], uses: ['agent', 'tool'], fires: ['loop', 'agent'], runs_as: ['loop', 'principal'], loop: ['principal', 'loop'] };

  let graph = null; // the build's graph
  let rows = []; // the build's access review rows
  let nodes = new Map(); // kind + '\0' + id -> {g, x, y}
  let asked = 0; // the number of the latest request: an older answer that arrives later is dropped

  function showError(res) {
    ui.showError($('error'), res, 'Enter the bearer token (API key or JWT) of a principal that holds the audit role in lush.yaml roles.');
  }

  function svg(tag, attrs) {
    const e = document.createElementNS(SVG, tag);
    for (const k in attrs) e.setAttribute(k, String(attrs[k]));
    return e;
  }

  function short(s, n) {
    s = String(s);
    return s.length > n ? s.slice(0, n - 1) + '\u2026' : s;
  }

  function draw() {
    const box = $('graph-svg');
    clear(box);
    nodes = new Map();
    const cols = COLUMNS.filter((k) => graph.nodes.some((n) => n.kind === k));
    let height = 0;
    cols.forEach((kind, c) => {
      const list = graph.nodes.filter((n) => n.kind === kind);
      list.forEach((n, i) => {
        const x = PAD + c * (W + GAP_X), y = PAD + 22 + i * (H + GAP_Y);
        const g = svg('g', { class: 'node kind-' + kind, transform: 'translate(' + x + ',' + y + ')' });
        g.dataset.id = n.id;
        g.dataset.kind = kind;
        g.appendChild(svg('rect', { width: W, height: H, rx: kind === 'principal' ? 14 : 4 }));
        const t = svg('text', { x: 10, y: 18 });
        t.textContent = short(n.id, 27);
        g.appendChild(t);
        const title = svg('title', {});
        title.textContent = kind + ' ' + n.id;
        g.appendChild(title);
        if (kind === 'principal') {
          g.setAttribute('tabindex', '0');
          g.setAttribute('role', 'button');
          g.setAttribute('aria-label', 'show what ' + n.id + ' reaches');
          const pick = () => { $('principal').value = n.id; select(n.id); };
          g.addEventListener('click', pick);
          g.addEventListener('keydown', (ev) => { if (ev.key === 'Enter' || ev.key === ' ') { ev.preventDefault(); pick(); } });
        }
        nodes.set(kind + '\0' + n.id, { g: g, x: x, y: y });
        height = Math.max(height, y + H + PAD);
      });
      const head = svg('text', { x: PAD + c * (W + GAP_X), y: PAD + 10, class: 'column' });
      head.textContent = kind + 's';
      box.appendChild(head);
    });
    const edges = svg('g', { class: 'edges' });
    box.appendChild(edges);
    for (const e of graph.edges) {
      const ends = ENDS[e.kind] || ['principal', 'loop'];
      const a = nodes.get(ends[0] + '\0' + e.from), b = nodes.get(ends[1] + '\0' + e.to);
      if (!a || !b) continue;
      let d;
      if (a.x === b.x) { // agent to agent: a loop to the right
        const x = a.x + W, dx = GAP_X * 0.6;
        d = 'M' + x + ',' + (a.y + H / 2) + ' C' + (x + dx) + ',' + (a.y + H / 2) + ' ' + (x + dx) + ',' + (b.y + H / 2) + ' ' + x + ',' + (b.y + H / 2);
      } else {
        const fwd = a.x < b.x;
        const x1 = fwd ? a.x + W : a.x, x2 = fwd ? b.x : b.x + W, mid = (x1 + x2) / 2;
        d = 'M' + x1 + ',' + (a.y + H / 2) + ' C' + mid + ',' + (a.y + H / 2) + ' ' + mid + ',' + (b.y + H / 2) + ' ' + x2 + ',' + (b.y + H / 2);
      }
      const p = svg('path', { d: d, class: 'edge edge-' + e.kind });
      p.dataset.from = e.from;
      p.dataset.to = e.to;
      p.dataset.kind = e.kind;
      const title = svg('title', {});
      title.textContent = e.from + ' ' + e.kind + ' ' + e.to + (e.label ? ' (' + e.label + ')' : '');
      p.appendChild(title);
      edges.appendChild(p);
    }
    for (const n of nodes.values()) box.appendChild(n.g); // nodes above edges
    box.setAttribute('width', PAD * 2 + cols.length * W + Math.max(0, cols.length - 1) * GAP_X + GAP_X * 0.6);
    box.setAttribute('height', Math.max(height, 80));
  }

  // select highlights what principal p reaches and lists it with the grants that give it.
  function select(p) {
    const box = $('graph-svg');
    const mine = rows.filter((r) => r.subject === p && r.agent);
    const roles = rows.filter((r) => r.subject === p && r.action);
    const agents = new Set(mine.map((r) => r.agent));
    const tools = new Set(mine.map((r) => r.agent + '\0' + r.tool));
    box.querySelectorAll('.node').forEach((g) => {
      const k = g.dataset.kind, id = g.dataset.id;
      const on = p !== '' && ((k === 'principal' && id === p) || (k === 'agent' && agents.has(id)) ||
        (k === 'tool' && mine.some((r) => r.tool === id)));
      g.classList.toggle('on', on);
      g.classList.toggle('dim', p !== '' && !on);
    });
    box.querySelectorAll('path.edge').forEach((e) => {
      const k = e.dataset.kind;
      const on = p !== '' && ((k === 'invokes' && agents.has(e.dataset.to) && (e.dataset.from === p || e.dataset.from === 'group:everyone')) ||
        (k === 'uses' && tools.has(e.dataset.from + '\0' + e.dataset.to)));
      e.classList.toggle('on', on);
      e.classList.toggle('dim', p !== '' && !on);
    });
    const tbody = $('reach-rows');
    clear(tbody);
    if (p === '') {
      $('reach-title').textContent = 'Select a principal';
      $('reach-summary').textContent = '';
      $('reach-table').hidden = true;
      return;
    }
    $('reach-title').textContent = p;
    for (const r of mine) {
      const tr = el('tr', null, 'row');
      tr.tabIndex = 0;
      tr.appendChild(el('td', r.agent));
      tr.appendChild(el('td', r.tool + (r.name ? ' (' + (r.name === '*' ? 'any other tool' : r.name) + ')' : '')));
      tr.appendChild(el('td', r.access));
      tr.appendChild(el('td', r.outcome, 'outcome-' + String(r.outcome).replace(/[^a-z_]/g, '')));
      tr.appendChild(el('td', (r.granted_by || []).join('; ') + (r.conditions && r.conditions.length ? '; decided per call by ' + r.conditions.join(', ') : '')));
      tbody.appendChild(tr);
    }
    $('reach-table').hidden = mine.length === 0;
    let summary = mine.length === 0 ? p + ' reaches nothing through the agents of this build.'
      : p + ' reaches ' + tools.size + (tools.size === 1 ? ' tool' : ' tools') + ' through ' + agents.size + (agents.size === 1 ? ' agent.' : ' agents.');
    if (roles.length) summary += ' Project roles: ' + roles.map((r) => r.action).join(', ') + '.';
    $('reach-summary').textContent = summary;
  }

  async function load() {
    $('status').textContent = 'Loading…';
    const builds = await ui.buildPicker($('build'), $('error'));
    if (!builds) { $('status').textContent = 'The builds could not be read.'; return; }
    if (builds.length === 0) { $('status').textContent = 'This server keeps no builds (lushctl build keeps them).'; return; }
    await show();
  }

  async function show() {
    const hash = $('build').value;
    const enc = encodeURIComponent(hash);
    const n = ++asked;
    const [g, rv] = await Promise.all([ui.request(api('/builds/' + enc + '/graph'), 'GET'), ui.request(api('/builds/' + enc + '/review'), 'GET')]);
    if (n !== asked) return;
    for (const res of [g, rv]) {
      if (res.status !== 200 || !res.body) { showError(res); $('status').textContent = 'The build could not be read.'; return; }
    }
    ui.hideError($('error'));
    graph = { nodes: g.body.nodes || [], edges: g.body.edges || [] };
    rows = rv.body.rows || [];
    const subjects = new Set(graph.nodes.filter((n) => n.kind === 'principal').map((n) => n.id));
    for (const r of rows) subjects.add(r.subject);
    const sel = $('principal');
    const keep = sel.value;
    clear(sel);
    sel.appendChild(new Option('(choose a principal)', ''));
    for (const s of Array.from(subjects).sort()) sel.appendChild(new Option(s, s));
    sel.value = subjects.has(keep) ? keep : '';
    draw();
    select(sel.value);
    $('status').textContent = 'Build ' + hash.slice(0, 12) + ': ' + graph.nodes.length + ' nodes, ' + graph.edges.length + ' edges. (Decisions ' + g.decisionID + ', ' + rv.decisionID + '.)';
  }

  function init() {
    ui.tokenForm(load, showError);
    $('controls').addEventListener('submit', (ev) => { ev.preventDefault(); show(); });
    $('build').addEventListener('change', show);
    $('principal').addEventListener('change', () => select($('principal').value));
    if (ui.token()) load();
  }

  ui.ready(init);
})();
