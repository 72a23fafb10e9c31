// timekeeper console (docs/console.md): plain JavaScript, no build step, no library.
// Every value from the API is shown with textContent or as an attribute value set through the DOM:
// nothing is ever parsed as markup. The token lives in this tab's sessionStorage and travels only in
// the Authorization header. Every URL is relative to where the page is served, so the console works
// offline (/console) and under a deployed stage's prefix (/api/console).
'use strict';

(() => {
  const TOKEN_KEY = 'timekeeper.console.token';
  const SCHEME_KEY = 'timekeeper.console.scheme'; // how the token is sent: bearer (default), raw or api-key
  const PAGE = 50; // tasks per API page (the API's most)
  const COUNT_PAGES = 10; // at most this many pages are counted per status on the Now view
  const POLL_MS = 2000;
  const NOW_CAP = 20; // tasks listed on the Now view (the chart counts them all)
  const REFRESH_MS = 15000; // a live view (LIVE_VIEWS) is read again this often while the switch is on
  const LIVE_VIEWS = new Set(['now', 'tasks', 'task', 'source', 'backups', 'failures', 'dead-letters']);
  const GROUP_PAGES = 10; // failures and dead letters are grouped from at most this many pages (500 tasks)
  const path = location.pathname;
  const ROOT = path.slice(0, path.lastIndexOf('/console') + 1); // "/" offline, "/<stage>/" behind API Gateway
  const $ = (id) => document.getElementById(id);
  let pollTimer = 0;
  let refreshTimer = 0;
  let refreshes = 0; // live refreshes drawn (the browser test counts them)
  let retrying = false; // a "Retry all shown" is under way: no refresh meanwhile
  const sortMemory = new Map(); // view address -> the column its table is sorted by, kept across refreshes
  let renderCount = 0; // a render outdated by a newer one drops its results

  // --- DOM building: elements and text only -------------------------------------------------------
  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name === 'on') {
        for (const [event, handler] of Object.entries(value)) node.addEventListener(event, handler);
      } else if (name === 'class') {
        node.className = value;
      } else {
        node.setAttribute(name, value === true ? '' : String(value));
      }
    }
    append(node, children);
    return node;
  }

  function append(node, children) {
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const SVG = 'http://www.w3.org/2000/svg';
  function s(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
    if (text !== undefined) node.textContent = String(text);
    return node;
  }

  function replace(node, ...children) {
    node.replaceChildren();
    return append(node, children);
  }

  const text = (value) => (value === null || value === undefined || value === '' ? '—' : String(value));
  const json = (value) => h('pre', {}, JSON.stringify(value, null, 2));
  const status = (value) => h('span', { class: 's-' + String(value).replace(/[^A-Z_]/g, '') }, text(value));
  // A time in the browser's zone with its offset and how far it is from now ("in 3 min", "2 min ago"); UTC on hover.
  const pad = (n) => String(n).padStart(2, '0');
  function localTime(at, now) {
    const d = new Date(at);
    const off = -d.getTimezoneOffset();
    const offset = (off < 0 ? '-' : '+') + pad(Math.floor(Math.abs(off) / 60)) + ':' + pad(Math.abs(off) % 60);
    const day = d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate());
    const today = new Date(now);
    const sameDay = day === today.getFullYear() + '-' + pad(today.getMonth() + 1) + '-' + pad(today.getDate());
    return (sameDay ? '' : day + ' ') + pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds()) + ' ' + offset;
  }
  function relative(at, now) {
    const seconds = Math.round((at - now) / 1000);
    const size = Math.abs(seconds);
    if (size < 1) return 'now';
    const words = size < 60 ? size + ' s' : size < 3600 ? Math.round(size / 60) + ' min'
      : size < 172800 ? Math.round(size / 3600) + ' h' : Math.round(size / 86400) + ' d';
    return seconds > 0 ? 'in ' + words : words + ' ago';
  }
  function when(iso) {
    const at = Date.parse(iso);
    if (!iso || !Number.isFinite(at)) return text(iso);
    const now = Date.now();
    const utc = new Date(at).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z') + ' (UTC)';
    return h('time', { datetime: new Date(at).toISOString(), title: utc, class: 'when' }, localTime(at, now), ' ',
      h('span', { class: 'rel' }, relative(at, now)));
  }
  const link = (hash, label) => h('a', { href: hash }, label);
  const taskHash = (id) => '#/task/' + encodeURIComponent(id);
  const message = (kind, ...words) => h('p', { class: 'message ' + kind, role: kind === 'error' ? 'alert' : null }, words);

  function table(headers, rows, empty) {
    if (!rows.length) return h('p', { class: 'muted' }, empty);
    return h('div', { class: 'table-wrap' }, h('table', {},
      h('thead', {}, h('tr', {}, headers.map((name) => h('th', { scope: 'col' }, name)))),
      h('tbody', {}, rows.map((cells) => h('tr', {}, cells.map((cell) => h('td', {}, cell)))))));
  }

  // Tasks by due time, soonest first; a task without one last, then by id (pure: the browser test checks it).
  const dueOf = (t) => { const at = Date.parse(t && t.run_at); return Number.isFinite(at) ? at : Infinity; };
  const compare = (x, y) => (typeof x === 'number' && typeof y === 'number' ? x - y : x < y ? -1 : x > y ? 1 : 0);
  function byDue(a, b) { return compare(dueOf(a), dueOf(b)) || compare(String(a.id), String(b.id)); }

  // A table of `items` whose column headers sort it (click again: the other way); columns: [name, cell(item), key(item)].
  function sortableTable(columns, items, empty, initial) {
    if (!items.length) return h('p', { class: 'muted' }, empty);
    const remembered = sortMemory.get(location.hash) || { sortBy: initial, descending: false };
    let { sortBy, descending } = remembered;
    const body = h('tbody', {});
    const heads = columns.map(([name], i) => h('th', { scope: 'col', 'aria-sort': 'none' },
      h('button', { type: 'button', class: 'sort', on: { click: () => {
        descending = sortBy === i ? !descending : false;
        sortBy = i;
        sortMemory.set(location.hash, { sortBy, descending });
        draw();
      } } }, name)));
    function draw() {
      const key = columns[sortBy][2];
      const rows = items.slice().sort((a, b) => {
        const x = key(a);
        const y = key(b);
        const order = typeof x === 'number' && typeof y === 'number' ? compare(x, y) : compare(String(x), String(y));
        return (descending ? -order : order) || byDue(a, b);
      });
      heads.forEach((th, i) => th.setAttribute('aria-sort', i === sortBy ? (descending ? 'descending' : 'ascending') : 'none'));
      replace(body, rows.map((item) => h('tr', {}, columns.map(([, cell]) => h('td', {}, cell(item))))));
    }
    draw();
    return h('div', { class: 'table-wrap' }, h('table', {}, h('thead', {}, h('tr', {}, heads)), body));
  }

  function fields(pairs) {
    return h('dl', {}, pairs.map(([name, value]) => [h('dt', {}, name), h('dd', {}, value instanceof Node ? value : text(value))]));
  }

  function say(words) { $('status').textContent = words; }

  // --- the API ---------------------------------------------------------------------------------------
  class ApiError extends Error {
    constructor(status, body) {
      const error = body && typeof body === 'object' && typeof body.error === 'string' ? body.error : null;
      super(error || (typeof body === 'string' && body ? body : 'the API answered HTTP ' + status));
      this.status = status;
      this.field = body && typeof body === 'object' && typeof body.field === 'string' ? body.field : null;
    }
    words() { return 'HTTP ' + this.status + ': ' + this.message + (this.field ? ' (field: ' + this.field + ')' : ''); }
  }
  class SignedOut extends Error {}

  async function api(method, route, body) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (!token) throw new SignedOut('Sign in with the API token to see the console.');
    const scheme = sessionStorage.getItem(SCHEME_KEY) || 'bearer';
    const headers = { Accept: 'application/json' };
    if (scheme === 'api-key') headers['x-api-key'] = token;
    else headers.Authorization = scheme === 'raw' ? token : 'Bearer ' + token;
    const init = { method, headers, cache: 'no-store', credentials: 'omit', referrerPolicy: 'no-referrer' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let response;
    try {
      response = await fetch(ROOT + route, init);
    } catch (failure) {
      throw new ApiError(0, 'the API could not be reached (' + failure.message + ')');
    }
    const raw = await response.text();
    let data = raw;
    try { data = raw ? JSON.parse(raw) : null; } catch (ignored) { /* shown as text */ }
    if (!response.ok) throw new ApiError(response.status, data);
    return data;
  }

  const query = (params) => {
    const parts = Object.entries(params).filter(([, v]) => v !== '' && v !== null && v !== undefined)
      .map(([k, v]) => encodeURIComponent(k) + '=' + encodeURIComponent(v));
    return parts.length ? '?' + parts.join('&') : '';
  };

  // Every page of a listing up to `pages` pages: [items, complete?]
  async function pagesOf(route, params, key, pages) {
    const found = [];
    let token = '';
    for (let i = 0; i < pages; i += 1) {
      const page = await api('GET', route + query({ ...params, next_token: token }));
      found.push(...(page[key] || []));
      token = page.next_token;
      if (!token) return [found, true];
    }
    return [found, false];
  }

  // --- pure decisions (shared by the views) ----------------------------------------------------------
  function percentile(sorted, p) {
    if (!sorted.length) return null;
    const rank = Math.ceil((p / 100) * sorted.length) - 1;
    return sorted[Math.min(sorted.length - 1, Math.max(0, rank))];
  }

  // Each task's last execution: how late it started from its own due time (an operator's retry from the retry's
  // time: the API's last_execution.lateness_ms); a task the API shows no execution of: its end minus its due time.
  function lateness(tasks) {
    const pointOf = (t) => {
      const last = t.last_execution;
      if (last && Number.isFinite(last.lateness_ms)) {
        return { id: t.id, status: t.status, at: Date.parse(last.finished_at || t.finished_at), seconds: last.lateness_ms / 1000 };
      }
      return { id: t.id, status: t.status, at: Date.parse(t.finished_at), seconds: (Date.parse(t.finished_at) - Date.parse(t.run_at)) / 1000 };
    };
    return tasks.filter((t) => t.run_at && t.finished_at).map(pointOf)
      .filter((p) => Number.isFinite(p.seconds) && Number.isFinite(p.at))
      .sort((a, b) => a.at - b.at);
  }

  function perMinute(tasks, now) {
    const minutes = new Array(60).fill(0);
    const due = [];
    for (const task of tasks) {
      const at = Date.parse(task.run_at);
      const minute = Math.floor((at - now) / 60000);
      if (Number.isFinite(at) && minute >= 0 && minute < 60) {
        minutes[minute] += 1;
        due.push(task);
      }
    }
    due.sort((a, b) => Date.parse(a.run_at) - Date.parse(b.run_at));
    return { minutes, due };
  }

  const seconds = (value) => (value === null ? '—' : (Math.round(value * 100) / 100) + ' s');
  const countLabel = (n, complete) => String(n) + (complete ? '' : '+'); // "500+": more than were counted

  // An error or a dead letter's reason as a cause shared by many tasks: the task's own id, times, UUIDs and long
  // hex ids (request ids) replaced by placeholders, spaces folded.
  function causeOf(words, id) {
    if (words === null || words === undefined || words === '') return 'no error recorded';
    let cause = String(words);
    if (id) { // the id as a word of its own only ("task b failed", not the b of "by")
      const own = new RegExp('(^|[^A-Za-z0-9_.:-])' + String(id).replace(/[.*+?^${}()|[\]\\]/g, '\\$&') + '(?![A-Za-z0-9_:-])', 'g');
      cause = cause.replace(own, '$1<task>');
    }
    return cause.replace(/\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?/g, '<time>')
      .replace(/\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b/gi, '<uuid>')
      .replace(/\b(?=[0-9a-f]*\d)[0-9a-f]{16,}\b/gi, '<id>')
      .replace(/\s+/g, ' ').trim().slice(0, 1000);
  }

  // A short stable fingerprint of a text (FNV-1a, two 32-bit lanes): 16 hex digits.
  function fingerprint(words) {
    let a = 0x811c9dc5;
    let b = 0x01000193 ^ 0x5bd1e995;
    for (let i = 0; i < words.length; i += 1) {
      const c = words.charCodeAt(i);
      a = Math.imul(a ^ c, 0x01000193) >>> 0;
      b = Math.imul(b ^ c, 0x5bd1e995) >>> 0;
    }
    return a.toString(16).padStart(8, '0') + b.toString(16).padStart(8, '0');
  }

  // Tasks grouped by cause: [{group, cause, tasks, first, last}], the largest group first (then the latest).
  // causeOf(task) gives a task's words, atOf(task) when it failed (ISO).
  function groupsOf(tasks, wordsOf, atOf) {
    const groups = new Map();
    for (const task of tasks) {
      const cause = causeOf(wordsOf(task), task.id);
      const at = Date.parse(atOf(task));
      const group = groups.get(cause) || { group: fingerprint(cause), cause, tasks: [], first: Infinity, last: -Infinity };
      group.tasks.push(task);
      if (Number.isFinite(at)) { group.first = Math.min(group.first, at); group.last = Math.max(group.last, at); }
      groups.set(cause, group);
    }
    return [...groups.values()].sort((x, y) => y.tasks.length - x.tasks.length || compare(y.last, x.last) || compare(x.cause, y.cause))
      .map((g) => ({ ...g, first: Number.isFinite(g.first) ? new Date(g.first).toISOString() : null,
        last: Number.isFinite(g.last) ? new Date(g.last).toISOString() : null }));
  }

  // The retry_id "Retry all shown" sends for a task: the same for the same failure (a second click, a lost answer:
  // the API answers 200 and runs nothing again), another once the task failed again (another finish or dead letter).
  function retryIdOf(task) {
    const dead = task.dead_letter || {};
    return 'console-' + fingerprint([task.id, task.run_at, task.finished_at, task.attempts, dead.at, dead.event_id].map((v) => text(v)).join('\n'));
  }

  // Lateness as a table for small screens: executions per range of seconds late.
  const LATE_BOUNDS = [1, 5, 30, 60, 300];
  function latenessBuckets(points) {
    const names = ['under 1 s', '1–5 s', '5–30 s', '30–60 s', '1–5 min', '5 min or more'];
    const counts = names.map(() => 0);
    for (const p of points) {
      const i = LATE_BOUNDS.findIndex((bound) => p.seconds < bound);
      counts[i < 0 ? LATE_BOUNDS.length : i] += 1;
    }
    return names.map((name, i) => [name, counts[i]]);
  }

  // The decisions above, for the browser test to check with data of its own (nothing else reads them).
  // tick() runs what the refresh timer runs (the test's controllable timer); armed() says whether it is set.
  window.timekeeperConsole = Object.freeze({ percentile, lateness, perMinute, countLabel, searchTargets, byDue, localTime, relative, allowedActions,
    causeOf, groupsOf, retryIdOf, latenessBuckets, tick, armed: () => Boolean(refreshTimer), refreshes: () => refreshes, refreshEvery: REFRESH_MS });

  // --- the confirmation dialog -------------------------------------------------------------------------
  function confirmAction({ title, words, label, value, ok }) {
    const dialog = $('confirm');
    $('confirm-title').textContent = title;
    $('confirm-text').textContent = words;
    $('confirm-ok').textContent = ok || 'Confirm';
    $('confirm-field').hidden = !label;
    $('confirm-label').textContent = label || '';
    $('confirm-input').value = value || '';
    return new Promise((resolve) => {
      dialog.addEventListener('close', () => {
        resolve(dialog.returnValue === 'ok' ? { value: $('confirm-input').value.trim() } : null);
      }, { once: true });
      dialog.returnValue = '';
      dialog.showModal();
      (label ? $('confirm-input') : $('confirm-ok')).focus();
    });
  }

  // An action button: a confirmation, the call, and the API's answer (or its error, as the API words it) in the
  // notice above the view, which stays while the view reloads and goes when the operator moves to another.
  function actionButton(label, ask, call, after, className) {
    const out = $('notice');
    return h('button', { type: 'button', class: className, on: { click: async () => {
      const answer = await confirmAction(ask());
      if (!answer) return;
      replace(out, message('', label + '…'));
      try {
        const result = await call(answer.value);
        replace(out, message('ok', label + ': done.', result && result.status ? ' Status now ' + result.status + '.' : ''));
        if (after) after(result);
      } catch (failure) {
        replace(out, failureMessage(failure, label + ' refused — '));
        if (failure instanceof SignedOut) showSignIn(failure.message);
      }
    } } }, label);
  }

  function failureMessage(failure, prefix) {
    const words = failure instanceof ApiError ? failure.words() : failure.message;
    return message('error', (prefix || 'Could not load: ') + words);
  }

  // --- views -----------------------------------------------------------------------------------------
  const COUNT_LINKS = { failed: '#/failures', 'dead-lettered': '#/dead-letters' }; // a count's view, by cause

  async function nowView(main, live) {
    const started = Date.now();
    const [pendingResult, failedResult, deadResult, runs] = await Promise.all([
      pagesOf('tasks', { status: 'PENDING', limit: PAGE }, 'tasks', COUNT_PAGES),
      pagesOf('tasks', { status: 'FAILED', limit: PAGE }, 'tasks', COUNT_PAGES),
      pagesOf('tasks', { status: 'DEAD_LETTERED', limit: PAGE }, 'tasks', COUNT_PAGES),
      api('GET', 'backups/runs?limit=1'),
    ]);
    if (!live()) return;
    const [pending, pendingAll] = pendingResult;
    const [failed, failedAll] = failedResult;
    const [dead, deadAll] = deadResult;
    const running = pending.filter((t) => t.status === 'RUNNING').length;
    const counts = [['pending', pending.length - running, pendingAll], ['running', running, pendingAll],
      ['failed', failed.length, failedAll], ['dead-lettered', dead.length, deadAll]];
    const { minutes, due } = perMinute(pending, started);
    const run = (runs.runs || [])[0];
    replace(main,
      h('h2', {}, 'Now'),
      h('ul', { class: 'counts', 'aria-label': 'Tasks by status' }, counts.map(([name, n, all]) =>
        h('li', { 'data-count': name }, h('span', { class: 'n' }, countLabel(n, all)),
          COUNT_LINKS[name] ? link(COUNT_LINKS[name], name) : name))),
      pendingAll && failedAll && deadAll ? null : h('p', { class: 'muted' }, 'Counted from the first ' + COUNT_PAGES * PAGE + ' of each status.'),
      h('h2', {}, 'Due in the next hour'),
      due.length ? timeline(minutes) : null,
      table(['due', 'task', 'strategy', 'status'], due.slice(0, NOW_CAP).map((t) => [when(t.run_at), taskLink(t), text(t.strategy), status(t.status)]),
        'No task is due in the next hour.'),
      due.length > NOW_CAP ? h('p', { id: 'due-more' }, 'The first ' + NOW_CAP + ' of ' + countLabel(due.length, pendingAll) + ' shown: ',
        link('#/tasks?status=PENDING', 'all pending tasks, by due time')) : null,
      h('h2', {}, 'Last backup run'),
      run ? fields([['run', link('#/run/' + encodeURIComponent(run.run_id), run.run_id)], ['status', status(run.status)],
        ['trigger', run.trigger], ['started', when(run.started_at)], ['finished', when(run.finished_at)],
        ['tables', run.table_count], ['summary', summaryText(run.summary)]])
        : h('p', { class: 'muted' }, 'No backup run yet.'));
  }

  function timeline(minutes) {
    const top = Math.max(...minutes, 1);
    const chart = s('svg', { class: 'chart', viewBox: '0 0 620 130', role: 'img',
      'aria-label': 'Tasks due per minute over the next hour (busiest minute: ' + top + ')' });
    minutes.forEach((n, i) => {
      if (!n) return;
      const height = (n / top) * 100;
      const bar = s('rect', { class: 'bar', x: 10 + i * 10, y: 105 - height, width: 8, height });
      bar.append(s('title', {}, '+' + i + ' min: ' + n));
      chart.append(bar);
    });
    chart.append(s('line', { class: 'axis', x1: 10, y1: 105, x2: 610, y2: 105 }));
    for (const minute of [0, 15, 30, 45, 60]) chart.append(s('text', { x: 6 + minute * 10, y: 122 }, '+' + minute + 'm'));
    return chart;
  }

  // The statuses GET /tasks lists and the strategies, as the API declares them: chalicelib/console writes them in.
  const FILTERS = {"statuses": [], "strategies": []};
  const STATUSES = [''].concat(FILTERS.statuses);
  const STRATEGIES = [''].concat(FILTERS.strategies);

  async function tasksView(main, live, params) {
    const filters = { status: params.get('status') || '', strategy: params.get('strategy') || '', source: params.get('source') || '',
      limit: params.get('limit') || '' }; // limit: the page's size (#/tasks?limit=10), the API's most by default
    const token = params.get('next_token') || '';
    const select = (name, options) => h('select', { id: 'filter-' + name, name },
      options.map((o) => h('option', { value: o, selected: o === filters[name] }, o || 'any')));
    const form = h('form', { class: 'filters', on: { submit: (event) => {
      event.preventDefault();
      const data = new FormData(form);
      location.hash = '#/tasks' + query({ status: data.get('status'), strategy: data.get('strategy'), source: data.get('source').trim(),
        limit: filters.limit });
    } } },
    h('div', {}, h('label', { for: 'filter-status' }, 'status'), select('status', STATUSES)),
    h('div', {}, h('label', { for: 'filter-strategy' }, 'strategy'), select('strategy', STRATEGIES)),
    h('div', {}, h('label', { for: 'filter-source' }, 'source'),
      h('input', { id: 'filter-source', name: 'source', value: filters.source, size: 14 })),
    h('button', { type: 'submit' }, 'Show'));
    const lookup = h('form', { class: 'filters', on: { submit: (event) => {
      event.preventDefault();
      const data = new FormData(lookup);
      location.hash = searchTargets(data.get('source') + '/' + data.get('key'))[0]; // source "api": the API's own task
    } } },
    h('div', {}, h('label', { for: 'lookup-source' }, 'task source'), h('input', { id: 'lookup-source', name: 'source', required: true, size: 14 })),
    h('div', {}, h('label', { for: 'lookup-key' }, 'item key (a value, or JSON)'), h('input', { id: 'lookup-key', name: 'key', required: true, size: 20 })),
    h('button', { type: 'submit' }, 'Open'));
    const results = h('div', { 'aria-live': 'polite' }, h('p', {}, 'Loading tasks…'));
    replace(main, h('h2', {}, 'Tasks'), form, results, h('h2', {}, "A task source item's task"), lookup);
    let page;
    try {
      page = await api('GET', 'tasks' + query({ status: filters.status, source: filters.source, limit: filters.limit || PAGE, next_token: token }));
    } catch (failure) {
      if (failure instanceof SignedOut) throw failure;
      if (live()) replace(results, failureMessage(failure));
      return;
    }
    if (!live()) return;
    const shown = (page.tasks || []).filter((t) => !filters.strategy || t.strategy === filters.strategy);
    const shownStatus = (t) => (t.dead_letter ? 'DEAD_LETTERED' : t.status);
    replace(results,
      ['FAILED', 'DEAD_LETTERED'].includes(filters.status) && shown.length ? h('p', { class: 'buttons' }, retryAllButton(shown)) : null,
      sortableTable([
        ['task', (t) => taskLink(t), (t) => String(t.id)],
        ['status', (t) => status(shownStatus(t)), (t) => String(shownStatus(t))],
        ['strategy', (t) => text(t.strategy), (t) => String(t.strategy || '')],
        ['due', (t) => when(t.run_at), dueOf],
        ['attempts', (t) => text(t.attempts), (t) => Number(t.attempts) || 0],
        ['last error', (t) => text(t.last_error || t.error), (t) => String(t.last_error || t.error || '')]],
      shown, 'No task on this page matches.', 3),
      h('p', { class: 'buttons' },
        token ? h('button', { type: 'button', on: { click: () => history.back() } }, 'Previous page') : null,
        page.next_token ? link('#/tasks' + query({ ...filters, next_token: page.next_token }), 'Next page') : null));
  }

  async function taskView(main, live, route) {
    const answer = await api('GET', route);
    if (!live()) return;
    const data = answer.task && answer.source ? answer.task : answer; // a task source's item: {source, key, task}
    const id = data.id;
    const past = await taskHistory(id);
    if (!live()) return;
    const reload = () => render();
    const post = (verb) => (value) => api('POST', 'tasks/' + encodeURIComponent(id) + '/' + verb, value ? { run_at: value } : undefined);
    const name = 'task ' + id;
    replace(main,
      h('h2', {}, 'Task ', h('code', {}, text(id))),
      fields([['status', status(data.status)], ['strategy', data.strategy], ['due', when(data.run_at)], ['attempts', data.attempts],
        ['created', when(data.created_at)], ['finished', when(data.finished_at)], ['recurrence', data.recurrence],
        ['time zone', data.timezone], ['ends at', when(data.end_at)],
        ['occurrences', data.max_occurrences ? (data.occurrences || 0) + ' of ' + data.max_occurrences : data.occurrences],
        ['window', data.window_seconds ? data.window_seconds + ' s' : null],
        ['retries', data.retry ? JSON.stringify(data.retry) : null],
        ['paused', data.paused === undefined ? null : String(data.paused)],
        ['invalid item', data.error ? data.error + (data.field ? ' (field: ' + data.field + ')' : '') : null]]),
      answer.source ? [h('h3', {}, 'Item of task source ', h('code', {}, answer.source)), json(answer.key)] : null,
      h('h3', {}, 'Action'), json(data.action === undefined ? null : data.action),
      h('h3', {}, 'Last result'), json(data.last_result === undefined ? null : data.last_result),
      h('h3', {}, 'Last error'), h('pre', {}, text(data.last_error)),
      h('h3', {}, 'Dead letter'), data.dead_letter ? json(data.dead_letter) : h('p', { class: 'muted' }, 'Not dead-lettered.'),
      h('h3', {}, 'Callbacks'), data.on_success || data.on_failure
        ? json({ on_success: data.on_success || null, on_failure: data.on_failure || null, last_run: data.callback || null })
        : h('p', { class: 'muted' }, 'No on_success or on_failure.'),
      h('h3', {}, 'History'), historyTimeline(past),
      h('h3', {}, 'Act on it'), actionsOf(data, name, reload, post),
      h('p', {}, link('#/tasks', 'All tasks')));
  }

  // --- a task's history (GET /tasks/{id}/history): its executions and the operator's changes, oldest first ---
  async function taskHistory(id) {
    try {
      return await api('GET', 'tasks/' + encodeURIComponent(id) + '/history');
    } catch (failure) {
      if (failure instanceof SignedOut) throw failure;
      return { error: failure instanceof ApiError ? failure.words() : String(failure) };
    }
  }

  const HISTORY_VERBS = { retry: 'Retried', pause: 'Paused', resume: 'Resumed', cancel: 'Cancelled', reschedule: 'Rescheduled' };
  const millis = (ms) => (Number.isFinite(ms) ? (ms < 1000 ? ms + ' ms' : Math.round(ms / 10) / 100 + ' s') : null);

  function historyEntry(entry) {
    if (entry.kind === 'run') {
      return h('li', { class: 'run' }, h('strong', {}, 'Execution '), status(entry.status), ' attempt ', text(entry.attempt),
        fields([['due', when(entry.due)], ['runs from', entry.runs_from ? when(entry.runs_from) : null],
          ['claimed', when(entry.claimed_at)], ['finished', when(entry.finished_at)], ['duration', millis(entry.duration_ms)],
          ['retry at', entry.retry_at ? when(entry.retry_at) : null], ['takeovers', entry.takeovers],
          ['result', entry.result], ['error', entry.error]].filter(([, value]) => value !== null && value !== undefined)));
    }
    return h('li', { class: 'operator' }, h('strong', {}, HISTORY_VERBS[entry.kind] || text(entry.kind)), ' by ', h('code', {}, text(entry.by)),
      ' ', when(entry.at), entry.due ? [' — due ', when(entry.due)] : null, entry.runs_from ? [', runs from ', when(entry.runs_from)] : null);
  }

  function historyTimeline(past) {
    if (!past || past.error) return h('p', { class: 'muted', id: 'history' }, 'No history: ' + text(past && past.error));
    const entries = Array.isArray(past.entries) ? past.entries : [];
    if (!entries.length) return h('p', { class: 'muted', id: 'history' }, 'No execution or change yet.');
    return h('div', { id: 'history' },
      past.dropped > 0 ? h('p', { class: 'muted' }, past.dropped + ' earlier entries are not kept (the last ' + past.keep + ' are).') : null,
      h('ol', { class: 'timeline' }, entries.map(historyEntry)));
  }

  // The operations the API allows in each status, from its declaration (chalicelib/console writes them in):
  // pause and resume take a recurring task only.
  const OPERATIONS = {"operations": {}};
  function allowedActions(task) {
    return Object.keys(OPERATIONS.operations).filter((operation) => (OPERATIONS.operations[operation] || []).includes(task.status)
      && (!['pause', 'resume'].includes(operation) || Boolean(task.recurrence)));
  }

  // A task's buttons: only those its status allows, each behind a confirmation.
  function actionsOf(data, name, reload, post) {
    const id = data.id;
    const buttons = {
      cancel: () => actionButton('Cancel', () => ({ title: 'Cancel the task?', words: 'Cancel ' + name + '? It will not run.', ok: 'Cancel the task' }),
        () => api('DELETE', 'tasks/' + encodeURIComponent(id)), reload, 'danger'),
      reschedule: () => actionButton('Reschedule', () => ({ title: 'Reschedule the task?', words: 'Move ' + name + ' to a new due time.',
        label: 'new due time (ISO-8601, UTC, or epoch seconds)', value: data.run_at || '', ok: 'Reschedule' }),
      (value) => api('PATCH', 'tasks/' + encodeURIComponent(id), { run_at: value }), reload),
      retry: () => actionButton('Retry', () => ({ title: 'Retry the task?', words: 'Run ' + name + ' again, once.',
        label: 'at (empty: now)', value: '', ok: 'Retry' }), post('retry'), reload),
      pause: () => actionButton('Pause', () => ({ title: 'Pause the task?', words: 'Skip the occurrences of ' + name + ' until it is resumed.', ok: 'Pause' }),
        post('pause'), reload),
      resume: () => actionButton('Resume', () => ({ title: 'Resume the task?', words: 'Run ' + name + ' again from its next occurrence.', ok: 'Resume' }),
        post('resume'), reload),
    };
    const allowed = allowedActions(data);
    if (!allowed.length) return h('p', { class: 'muted', id: 'no-actions' }, 'No action: a ' + text(data.status) + ' task cannot be changed.');
    return h('p', { class: 'buttons' }, allowed.map((operation) => buttons[operation]()));
  }

  // --- search: a task by its id, by a prefix of it, or by a task source's item key (source/key) ----------
  const SEARCH_PAGES = 10; // a prefix is looked for in at most this many pages of the listing (every status)

  // Where a search's words lead: the exact lookups to try, in order (pure, for the browser test).
  function searchTargets(words) {
    const slash = words.indexOf('/');
    if (slash < 0) return [taskHash(words)];
    const source = words.slice(0, slash);
    const key = words.slice(slash + 1);
    if (source === 'api') return [taskHash(key)]; // the API's own tasks: source "api" is their id
    return ['#/source/' + encodeURIComponent(source) + '/' + encodeURIComponent(key)];
  }

  async function searchView(main, live, params) {
    const words = (params.get('q') || '').trim();
    $('search-input').value = words;
    if (!words) { replace(main, h('h2', {}, 'Find a task'), h('p', { class: 'muted' }, 'Type an id, a prefix of one, or source/key.')); return; }
    for (const target of searchTargets(words)) {
      const { parts } = routeOf(target);
      const route = parts[0] === 'task' ? 'tasks/' + encodeURIComponent(parts[1])
        : 'tasks/' + encodeURIComponent(parts[1]) + '/' + encodeURIComponent(parts.slice(2).join('/'));
      try {
        await api('GET', route);
        if (live()) location.replace(target); // the task itself: its page (Back returns to where the search began)
        return;
      } catch (failure) {
        if (!(failure instanceof ApiError) || (failure.status !== 404 && failure.status !== 400)) throw failure;
      }
    }
    const [listed, complete] = await pagesOf('tasks', { limit: PAGE }, 'tasks', SEARCH_PAGES);
    if (!live()) return;
    const found = listed.filter((t) => String(t.id).startsWith(words)).sort(byDue);
    replace(main, h('h2', {}, 'Tasks whose id starts with ', h('code', {}, words)),
      complete ? null : h('p', { class: 'muted' }, 'Searched the first ' + SEARCH_PAGES * PAGE + ' listed tasks.'),
      table(['task', 'status', 'strategy', 'due'], found.map((t) => [taskLink(t),
        status(t.dead_letter ? 'DEAD_LETTERED' : t.status), text(t.strategy), when(t.run_at)]),
      'No task has that id, an id starting with it, or that source/key.'));
  }

  async function latenessView(main, live) {
    const [[done], [failed]] = await Promise.all([
      pagesOf('tasks', { status: 'DONE', limit: PAGE }, 'tasks', 4),
      pagesOf('tasks', { status: 'FAILED', limit: PAGE }, 'tasks', 2)]);
    if (!live()) return;
    const points = lateness([...done, ...failed]);
    const sorted = points.map((p) => p.seconds).sort((a, b) => a - b);
    const p50 = percentile(sorted, 50);
    const p99 = percentile(sorted, 99);
    replace(main, h('h2', {}, 'Lateness'),
      h('p', { class: 'muted' }, 'Recent executions (the newest ' + (4 * PAGE) + ' done and ' + (2 * PAGE) +
        ' failed tasks): seconds from each last execution\u2019s own due time (a retry\u2019s, for an operator\u2019s retry) to its start.'),
      fields([['executions', points.length], ['p50', h('span', { id: 'p50' }, seconds(p50))], ['p99', h('span', { id: 'p99' }, seconds(p99))],
        ['worst', seconds(sorted.length ? sorted[sorted.length - 1] : null)]]),
      points.length ? [latenessChart(points, p50, p99), h('div', { class: 'narrow-only', id: 'lateness-table' },
        table(['late by', 'executions'], latenessBuckets(points), ''))] : h('p', { class: 'muted' }, 'No finished execution yet.'),
      table(['finished', 'task', 'status', 'late by'], points.slice(-20).reverse().map((p) =>
        [when(new Date(p.at).toISOString()), link(taskHash(p.id), p.id), status(p.status), seconds(p.seconds)]), ''));
  }

  function latenessChart(points, p50, p99) {
    const top = Math.max(...points.map((p) => p.seconds), 0.01);
    const low = Math.min(...points.map((p) => p.seconds), 0);
    const first = points[0].at;
    const span = Math.max(points[points.length - 1].at - first, 1);
    const y = (value) => 105 - ((value - low) / (top - low)) * 88; // room above for the p99 label
    const chart = s('svg', { class: 'chart wide-only', viewBox: '0 0 620 130', role: 'img',
      'aria-label': 'Lateness of ' + points.length + ' executions; p50 ' + seconds(p50) + ', p99 ' + seconds(p99) });
    for (const p of points) {
      const dot = s('circle', { class: 'dot', cx: 10 + ((p.at - first) / span) * 600, cy: y(p.seconds), r: 3 });
      dot.append(s('title', {}, p.id + ': ' + seconds(p.seconds)));
      chart.append(dot);
    }
    for (const [name, value] of [['p50', p50], ['p99', p99]]) {
      chart.append(s('line', { class: name, x1: 10, x2: 610, y1: y(value), y2: y(value) }));
      chart.append(s('text', { x: name === 'p50' ? 14 : 585, y: y(value) - 3 }, name));
    }
    chart.append(s('line', { class: 'axis', x1: 10, y1: 105, x2: 610, y2: 105 }));
    chart.append(s('text', { x: 10, y: 122 }, seconds(low) + ' … ' + seconds(top)));
    return chart;
  }

  // --- failures and dead letters, grouped by cause; "Retry all shown" -------------------------------------
  const FAILURES = {
    title: 'Failures', status: 'FAILED', what: 'failed tasks', hash: '#/failures',
    wordsOf: (t) => t.last_error || t.error, atOf: (t) => t.finished_at,
    columns: [['due', (t) => when(t.run_at)], ['failed', (t) => when(t.finished_at)], ['attempts', (t) => text(t.attempts)],
      ['error', (t) => text(t.last_error || t.error)]],
  };
  const DEAD_LETTERS = {
    title: 'Dead letters', status: 'DEAD_LETTERED', what: 'dead-lettered tasks', hash: '#/dead-letters',
    wordsOf: (t) => (t.dead_letter || {}).reason, atOf: (t) => (t.dead_letter || {}).at,
    columns: [['due', (t) => when(t.run_at)], ['dead-lettered', (t) => when((t.dead_letter || {}).at)],
      ['by', (t) => text((t.dead_letter || {}).source || 'due_dead_letter')], ['reason', (t) => text((t.dead_letter || {}).reason)]],
  };

  // Failed (or dead-lettered) tasks, read from at most GROUP_PAGES pages of GET /tasks?status=..., grouped by cause;
  // ?group=<id>: one group's tasks, with "Retry all shown". The dead-letter view also says what TASK_DLQ holds.
  async function groupedView(main, live, params, kind) {
    const [[tasks, complete], queue] = await Promise.all([
      pagesOf('tasks', { status: kind.status, limit: PAGE }, 'tasks', GROUP_PAGES),
      kind === DEAD_LETTERS ? api('GET', 'dead-letters').catch((failure) => failure) : null]);
    if (!live()) return;
    const groups = groupsOf(tasks, kind.wordsOf, kind.atOf);
    const bound = complete ? null : h('p', { class: 'muted' }, 'Grouped from the first ' + GROUP_PAGES * PAGE + ' ' + kind.what + '.');
    const held = queue === null ? null : queue instanceof Error ? failureMessage(queue, 'Could not count the dead-letter queue: ')
      : h('p', { id: 'dlq-count' }, 'The task dead-letter queue ', h('code', {}, text(queue.queue)), ' holds ',
        h('strong', {}, String(queue.messages)), ' messages', queue.in_flight ? ' (and ' + queue.in_flight + ' being read)' : '',
        '. Each is a dead letter for a human; the tasks below are those still DEAD_LETTERED.');
    const chosen = params.get('group');
    if (chosen) {
      const group = groups.find((g) => g.group === chosen);
      const shownTasks = group ? group.tasks : [];
      replace(main, h('h2', {}, kind.title, ': one cause'), held, bound,
        group ? h('pre', { class: 'cause' }, group.cause) : h('p', { class: 'muted' }, 'No ' + kind.what + ' have this cause any more.'),
        shownTasks.length ? h('p', { class: 'buttons' }, retryAllButton(shownTasks)) : null,
        sortableTable([['task', taskLink, (t) => String(t.id)],
          ...kind.columns.map(([name, cell]) => [name, cell, name === 'due' ? dueOf : (t) => String(kind.atOf(t) || '')])],
        shownTasks, 'None.', 0),
        h('p', {}, link(kind.hash, 'All causes')));
      return;
    }
    replace(main, h('h2', {}, kind.title, ' by cause'), held, bound,
      table(['cause', 'tasks', 'first seen', 'last seen'], groups.map((g) => [h('span', { class: 'cause' }, g.cause),
        h('a', { href: kind.hash + query({ group: g.group }), class: 'count' }, g.tasks.length + (g.tasks.length === 1 ? ' task' : ' tasks')),
        when(g.first), when(g.last)]), 'No ' + kind.what + '.'));
  }

  // A listed task's address: a task source's item by its source and key (its id is "<source>/<key>").
  function taskRoute(t) {
    const id = String(t.id);
    const source = t.source && t.source !== 'api' && id.startsWith(t.source + '/') ? String(t.source) : '';
    return source ? [source, id.slice(source.length + 1)] : [id];
  }
  const taskLink = (t) => link('#/' + (taskRoute(t).length > 1 ? 'source/' : 'task/') + taskRoute(t).map(encodeURIComponent).join('/'), t.id);
  const RETRY_AT_ONCE = 4;
  const retryRoute = (t) => 'tasks/' + taskRoute(t).map(encodeURIComponent).join('/') + '/retry';
  const retryable = (t) => t.status === 'FAILED' || t.status === 'DEAD_LETTERED' || Boolean(t.dead_letter);

  // One request per task, each with its own retry_id (retryIdOf: the same on a second click), behind one
  // confirmation; each task's outcome in the notice above the view (kept while the view refreshes).
  function retryAllButton(tasks) {
    const chosen = tasks.filter(retryable);
    const button = h('button', { type: 'button', id: 'retry-all', on: { click: async () => {
      const answer = await confirmAction({ title: 'Retry ' + chosen.length + ' tasks?',
        words: 'Run each of the ' + chosen.length + ' tasks shown again, once: one request per task. Clicking again sends the same requests, which the API answers without running anything twice.',
        ok: 'Retry ' + chosen.length + ' tasks' });
      if (!answer) return;
      const out = $('notice');
      const rows = chosen.map((t) => [t, h('td', { 'data-task': t.id }, 'waiting…')]);
      replace(out, h('h3', {}, 'Retry all shown'), h('p', { id: 'retry-summary' }, 'Retrying ' + chosen.length + ' tasks…'),
        h('div', { class: 'table-wrap' }, h('table', { id: 'retry-outcomes' },
          h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'task'), h('th', { scope: 'col' }, 'outcome'))),
          h('tbody', {}, rows.map(([t, cell]) => h('tr', {}, h('td', {}, taskLink(t)), cell))))));
      retrying = true;
      button.disabled = true;
      let ok = 0;
      let next = 0;
      const worker = async () => { // RETRY_AT_ONCE requests in flight at most, each task's outcome in its row
        while (next < rows.length) {
          const [t, cell] = rows[next];
          next += 1;
          try {
            const answered = await api('POST', retryRoute(t), { retry_id: retryIdOf(t) });
            ok += 1;
            replace(cell, h('span', { class: 'ok' }, 'ok'), answered && answered.note ? ': ' + answered.note : ': retried',
              answered && answered.status ? ' (status now ' + answered.status + ')' : '');
          } catch (failure) {
            if (failure instanceof SignedOut) throw failure;
            replace(cell, h('span', { class: 'refused' }, 'refused'), ': ', failure instanceof ApiError ? failure.words() : failure.message);
          }
        }
      };
      try {
        await Promise.all(Array.from({ length: Math.min(RETRY_AT_ONCE, rows.length) }, worker));
        $('retry-summary').textContent = 'Retried ' + ok + ' of ' + chosen.length + ' tasks; ' + (chosen.length - ok) + ' refused.';
      } catch (failure) {
        showSignIn(failure.message);
      } finally {
        retrying = false;
        button.disabled = false;
      }
    } } }, 'Retry all shown (' + chosen.length + ')');
    return chosen.length ? button : null;
  }

  const restoreTarget = (table) => table + '-restored-' + new Date().toISOString().replace(/[-:]/g, '').slice(0, 15).toLowerCase();

  async function backupsView(main, live, params, poll) {
    const tableFilter = params.get('table') || '';
    const token = params.get('next_token') || '';
    const [runs, catalog, restores] = await Promise.all([
      api('GET', 'backups/runs?limit=10'),
      api('GET', 'backups' + query({ table: tableFilter, limit: 20, next_token: token })).catch((failure) => failure),
      api('GET', 'backups/restores?limit=10')]);
    if (!live()) return;
    const filter = h('form', { class: 'filters', on: { submit: (event) => {
      event.preventDefault();
      location.hash = '#/backups' + query({ table: new FormData(filter).get('table').trim() });
    } } }, h('div', {}, h('label', { for: 'catalog-table' }, 'table'),
      h('input', { id: 'catalog-table', name: 'table', value: tableFilter, size: 18 })), h('button', { type: 'submit' }, 'Show'));
    const restoreButton = (b) => actionButton('Restore…', () => ({ title: 'Restore to a new table?',
      words: 'Restore the backup ' + b.name + ' of ' + b.table + ' into a new table.', label: 'new table name', value: restoreTarget(b.table),
      ok: 'Restore' }), (target) => api('POST', 'backups/restores', { table: b.table, target, backup_arn: b.arn }), () => render());
    const catalogPart = catalog instanceof Error ? failureMessage(catalog) : [
      table(['table', 'backup', 'status', 'size', 'created', 'run', 'verification', 'kept', 'expires after', ''],
        (catalog.backups || []).map((b) => [text(b.table), text(b.name), status(b.status), b.size_bytes === null ? '—' : b.size_bytes + ' B',
          when(b.created), b.run_id ? link('#/run/' + encodeURIComponent(b.run_id), b.run_id) : '—', status(b.verification || (b.verified ? 'PASSED' : '—')),
          text(b.kept || (b.retention ? 'unknown' : b.status === 'AVAILABLE' ? 'no: expired' : null)), when(b.expires_after),
          b.status === 'AVAILABLE' ? restoreButton(b) : '']), 'No backup matches.'),
      catalog.next_token ? h('p', {}, link('#/backups' + query({ table: tableFilter, next_token: catalog.next_token }), 'Next page')) : null,
      catalog.exports ? [h('h3', {}, 'Exports to S3'), exportTable(catalog.exports, () => render())] : null];
    const runList = runs.runs || [];
    const exportRuns = runs.export_runs || [];
    const restoreList = restores.restores || [];
    replace(main, h('h2', {}, 'Backups'),
      h('p', { class: 'buttons' }, actionButton('Start a backup run', () => ({ title: 'Start a backup run?',
        words: "Back up the stage's selection of tables now.", ok: 'Start the run' }), () => api('POST', 'backups', {}),
      (started) => { location.hash = '#/run/' + encodeURIComponent(started.run_id); }, 'primary')),
      h('h3', {}, 'Recent runs'),
      table(['run', 'status', 'trigger', 'started', 'finished', 'tables', 'summary'], runList.map((r) => [
        link('#/run/' + encodeURIComponent(r.run_id), r.run_id), status(r.status), text(r.trigger), when(r.started_at), when(r.finished_at),
        text(r.table_count), summaryText(r.summary)]), 'No backup run yet.'),
      runs.export_runs ? [h('h3', {}, 'Recent export runs'), table(['run', 'status', 'export time', 'tables'], exportRuns.map((r) => [
        link('#/run/' + encodeURIComponent(r.run_id), r.run_id), status(r.status), when(r.export_time), text(r.table_count)]),
      'No export run yet.')] : null,
      h('h3', {}, 'Restores'),
      table(['restore', 'status', 'from', 'into', 'requested', 'finished', 'progress', 'error'], restoreList.map((r) => [
        link('#/restore/' + encodeURIComponent(r.restore_id), r.restore_id), status(r.status), text(r.table), text(r.target),
        when(r.requested_at), when(r.finished_at), progress(r), text(r.error)]), 'No restore yet.'),
      h('h3', {}, 'Catalog'), filter, catalogPart);
    if ([...runList, ...exportRuns].some((r) => r.status !== 'COMPLETE') || restoreList.some((r) => r.status === 'RESTORING')) poll();
  }

  // Exports to S3 (the catalog's, an export run's): size, item count, why kept, expiry, lock; a COMPLETED one restores.
  function exportTable(exports, after) {
    const restoreButton = (e) => actionButton('Restore…', () => ({ title: 'Restore to a new table?',
      words: 'Import the export ' + e.run_id + ' of ' + e.table + ' into a new table.', label: 'new table name', value: restoreTarget(e.table),
      ok: 'Restore' }), (target) => api('POST', 'backups/restores', { table: e.table, target, export: e.run_id }), after);
    return table(['table', 'export time', 'status', 'size', 'items', 'run', 'kept', 'expires', 'locked until', ''], exports.map((e) => [
      text(e.table), when(e.export_time), [status(e.status), e.error ? ' ' + e.error : ''], e.size_bytes + ' B', text(e.item_count),
      link('#/run/' + encodeURIComponent(e.run_id), e.run_id), text(e.deleted ? 'no: deleted' : (e.kept_because || []).join(', ')),
      when(e.expires), when(e.locked_until), e.status === 'COMPLETED' && !e.deleted ? restoreButton(e) : '']), 'No export yet.');
  }

  // A run's counts as words ("backed_up 3, failed 0, ..."), without its own address.
  const summaryText = (summary) => Object.entries(summary || {}).filter(([k]) => k !== 'href')
    .map(([k, v]) => k + ' ' + (typeof v === 'object' ? JSON.stringify(v) : v)).join(', ');

  function progress(restore) {
    const c = restore.comparison;
    if (restore.status === 'RESTORING') return 'restoring…';
    if (!c) return '—';
    const items = c.restored_items !== undefined ? c.restored_items + ' of ' + text(c.recorded_items) + ' items' : '';
    const problems = (c.problems || []).length ? (c.problems || []).length + ' problems' : 'no problems';
    return items ? items + ', ' + problems : problems;
  }

  async function runView(main, live, id, poll) {
    const run = await api('GET', 'backups/runs/' + encodeURIComponent(id));
    if (!live()) return;
    if (run.kind === 'export') {
      replace(main, h('h2', {}, 'Export run ', h('code', {}, text(run.run_id))),
        fields([['status', h('span', { id: 'run-status' }, status(run.status))], ['export time', when(run.export_time)],
          ['tables', run.table_count], ['summary', summaryText(run.summary)]]),
        h('h3', {}, 'Exports'), exportTable(run.exports || [], () => render()), h('p', {}, link('#/backups', 'All backups')));
      if (run.status !== 'COMPLETE') poll();
      return;
    }
    const checks = new Map((run.verifications || []).map((v) => [v.table, v]));
    replace(main, h('h2', {}, 'Backup run ', h('code', {}, text(run.run_id))),
      fields([['status', h('span', { id: 'run-status' }, status(run.status))], ['trigger', run.trigger], ['started', when(run.started_at)],
        ['finished', when(run.finished_at)], ['tables', run.table_count], ['summary', summaryText(run.summary)]]),
      h('h3', {}, 'Tables'),
      table(['table', 'status', 'backup', 'point-in-time recovery', 'verification', 'error'], (run.tables || []).map((t) => {
        const check = checks.get(t.table);
        return [text(t.table), status(t.status), text(t.backup_name), text(t.pitr),
          check ? [status(check.status), check.error ? ' ' + check.error : ''] : (run.verify_plan || []).includes(t.table) ? 'planned' : '—', text(t.error)];
      }), 'The run has no table.'),
      h('p', {}, link('#/backups', 'All backups')));
    if (run.status !== 'COMPLETE') poll();
  }

  async function restoreView(main, live, id, poll) {
    const r = await api('GET', 'backups/restores/' + encodeURIComponent(id));
    if (!live()) return;
    replace(main, h('h2', {}, 'Restore ', h('code', {}, text(r.restore_id))),
      fields([['status', status(r.status)], ['from table', r.table], ['into table', r.target], ['requested', when(r.requested_at)],
        ['finished', when(r.finished_at)], ['progress', progress(r)], ['settings applied', (r.settings_applied || []).join(', ')],
        ['billing', r.billing_mode], ['error', r.error]]),
      h('h3', {}, 'Restored from'), json(r.restored_from), h('h3', {}, 'Comparison'), json(r.comparison),
      h('p', {}, link('#/backups', 'All backups')));
    if (r.status === 'RESTORING') poll();
  }

  // --- routing, sign-in, rendering -------------------------------------------------------------------
  function routeOf(hash) {
    const [pathPart, search] = hash.replace(/^#\/?/, '').split('?');
    const parts = pathPart.split('/').map((p) => { try { return decodeURIComponent(p); } catch (e) { return p; } });
    return { name: parts[0] || 'now', parts, params: new URLSearchParams(search || '') };
  }

  function forget() {
    sessionStorage.removeItem(TOKEN_KEY);
    sessionStorage.removeItem(SCHEME_KEY);
  }

  function showSignIn(why) {
    clearTimeout(pollTimer);
    clearTimeout(refreshTimer);
    refreshTimer = 0;
    $('live-switch').hidden = true;
    $('sign-in').hidden = false;
    $('sign-out').hidden = true;
    $('sign-in-why').textContent = why;
    $('notice').replaceChildren();
    replace($('main'), h('p', { class: 'muted' }, 'Signed out: nothing is shown until the API accepts a token.'));
    say('');
    $('token').focus();
  }

  // --- live views: read again every REFRESH_MS, drawn apart and swapped in whole (the scroll position kept) ----
  function refreshHold() {
    if (!$('live').checked) return 'paused';
    if ($('confirm').open) return 'a dialog is open';
    if (retrying) return 'retrying';
    const active = document.activeElement;
    if (active && $('main').contains(active) && ['INPUT', 'SELECT', 'TEXTAREA'].includes(active.tagName)) return 'a field is in use';
    return null;
  }

  function armRefresh() {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(tick, REFRESH_MS);
  }

  // What the refresh timer runs: the view read again, unless held (then the timer is set again); says which.
  function tick() {
    clearTimeout(refreshTimer);
    refreshTimer = 0;
    const hold = refreshHold();
    if (hold) { armRefresh(); return hold; }
    render(true);
    return 'refreshed';
  }

  function swapIn(main, drawn) {
    const [x, y] = [window.scrollX, window.scrollY];
    main.replaceChildren(...drawn.childNodes);
    window.scrollTo(x, y);
  }

  async function render(refresh) {
    clearTimeout(pollTimer);
    clearTimeout(refreshTimer);
    pollTimer = 0;
    refreshTimer = 0;
    const mine = ++renderCount;
    const live = () => mine === renderCount;
    const poll = () => { if (live()) pollTimer = setTimeout(() => { if (live()) render(); }, POLL_MS); };
    const { name, parts, params } = routeOf(location.hash);
    const view = { task: 'tasks', source: 'tasks', run: 'backups', restore: 'backups' }[name] || name;
    for (const a of document.querySelectorAll('nav a')) {
      if (a.dataset.view === view) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
    }
    const shown = $('main');
    if (!sessionStorage.getItem(TOKEN_KEY)) { showSignIn('Type the API token once; it is kept in this tab only.'); return; }
    $('sign-in').hidden = true;
    $('sign-out').hidden = false;
    $('live-switch').hidden = !LIVE_VIEWS.has(name);
    const main = refresh ? h('div', {}) : shown; // a refresh draws apart, then replaces the view at once
    if (!refresh) {
      if (!shown.firstChild || shown.dataset.view !== view) replace(shown, h('p', {}, 'Loading…'));
      shown.dataset.view = view;
      say('Loading…');
    }
    const again = () => { if (live() && LIVE_VIEWS.has(name) && !pollTimer) armRefresh(); };
    try {
      if (name === 'now') await nowView(main, live);
      else if (name === 'tasks') await tasksView(main, live, params);
      else if (name === 'task') await taskView(main, live, 'tasks/' + encodeURIComponent(parts[1] || ''));
      else if (name === 'source') await taskView(main, live, 'tasks/' + encodeURIComponent(parts[1] || '') + '/' + encodeURIComponent(parts.slice(2).join('/')));
      else if (name === 'search') await searchView(main, live, params);
      else if (name === 'lateness') await latenessView(main, live);
      else if (name === 'failures') await groupedView(main, live, params, FAILURES);
      else if (name === 'dead-letters') await groupedView(main, live, params, DEAD_LETTERS);
      else if (name === 'backups') await backupsView(main, live, params, poll);
      else if (name === 'run') await runView(main, live, parts[1] || '', poll);
      else if (name === 'restore') await restoreView(main, live, parts[1] || '', poll);
      else replace(main, message('error', 'No such view: ' + name + '.'), link('#/now', 'Now'));
      if (!live()) return;
      if (refresh) { swapIn(shown, main); refreshes += 1; }
      say('Updated ' + new Date().toLocaleTimeString() + (LIVE_VIEWS.has(name) && $('live').checked ? ' (live).' : '.'));
      again();
    } catch (failure) {
      if (!live()) return;
      if (failure instanceof SignedOut) { showSignIn(failure.message); return; }
      if (failure instanceof ApiError && (failure.status === 401 || failure.status === 403)) {
        forget();
        showSignIn('Unauthorized: ' + failure.words());
        return;
      }
      if (refresh) say('Could not refresh (' + (failure instanceof ApiError ? failure.words() : failure.message) + '); shown as read before.');
      else { replace(main, failureMessage(failure)); say(''); }
      again();
    }
  }

  async function signIn(event) {
    event.preventDefault();
    const token = $('token').value.trim();
    if (!token) return;
    sessionStorage.setItem(TOKEN_KEY, token);
    sessionStorage.setItem(SCHEME_KEY, $('scheme').value);
    $('token').value = '';
    try {
      await api('GET', 'tasks?limit=1'); // the token checked once, with the smallest answer
    } catch (failure) {
      forget();
      const refused = failure instanceof ApiError && (failure.status === 401 || failure.status === 403);
      showSignIn((refused ? 'Unauthorized: ' : 'Could not check the token: ') + (failure.words ? failure.words() : failure.message));
      return;
    }
    render();
    $('main').focus();
  }

  document.addEventListener('DOMContentLoaded', () => {
    $('sign-in-form').addEventListener('submit', signIn);
    $('sign-out').addEventListener('click', () => {
      forget();
      showSignIn('Signed out.');
    });
    $('search').addEventListener('submit', (event) => {
      event.preventDefault();
      location.hash = '#/search' + query({ q: $('search-input').value.trim() });
    });
    window.addEventListener('hashchange', () => { $('notice').replaceChildren(); render(); });
    $('live-every').textContent = REFRESH_MS / 1000 + ' s';
    $('live').addEventListener('change', () => {
      if ($('live').checked) tick(); // on again: read the view now
      else say('Live updates paused.');
    });
    render();
  });
})();
