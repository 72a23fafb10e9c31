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
  const path = location.pathname;
  const ROOT = path.slice(0, path.lastIndexOf('/console') + 1); // "/" offline, "/<stage>/" behind API Gateway
  const $ = (id) => document.getElementById(id);
  let pollTimer = 0;
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
    let sortBy = initial;
    let descending = false;
    const body = h('tbody', {});
    const heads = columns.map(([name], i) => h('th', { scope: 'col', 'aria-sort': 'none' },
      h('button', { type: 'button', class: 'sort', on: { click: () => {
        descending = sortBy === i ? !descending : false;
        sortBy = i;
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

  // The decisions above, for the browser test to check with data of its own (nothing else reads them).
  window.timekeeperConsole = Object.freeze({ percentile, lateness, perMinute, countLabel, searchTargets, byDue, localTime, relative, allowedActions });

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
        h('li', { 'data-count': name }, h('span', { class: 'n' }, countLabel(n, all)), name))),
      pendingAll && failedAll && deadAll ? null : h('p', { class: 'muted' }, 'Counted from the first ' + COUNT_PAGES * PAGE + ' of each status.'),
      h('h2', {}, 'Due in the next hour'),
      due.length ? timeline(minutes) : null,
      table(['due', 'task', 'strategy', 'status'], due.slice(0, NOW_CAP).map((t) => [when(t.run_at), link(taskHash(t.id), t.id), text(t.strategy), status(t.status)]),
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
      sortableTable([
        ['task', (t) => link(taskHash(t.id), t.id), (t) => String(t.id)],
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
      table(['task', 'status', 'strategy', 'due'], found.map((t) => [link(taskHash(t.id), t.id),
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
      points.length ? latenessChart(points, p50, p99) : h('p', { class: 'muted' }, 'No finished execution yet.'),
      table(['finished', 'task', 'status', 'late by'], points.slice(-20).reverse().map((p) =>
        [when(new Date(p.at).toISOString()), link(taskHash(p.id), p.id), status(p.status), seconds(p.seconds)]), ''));
  }

  function latenessChart(points, p50, p99) {
    const top = Math.max(...points.map((p) => p.seconds), 0.01);
    const low = Math.min(...points.map((p) => p.seconds), 0);
    const first = points[0].at;
    const span = Math.max(points[points.length - 1].at - first, 1);
    const y = (value) => 105 - ((value - low) / (top - low)) * 88; // room above for the p99 label
    const chart = s('svg', { class: 'chart', viewBox: '0 0 620 130', role: 'img',
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
      catalog.next_token ? h('p', {}, link('#/backups' + query({ table: tableFilter, next_token: catalog.next_token }), 'Next page')) : null];
    const runList = runs.runs || [];
    const restoreList = restores.restores || [];
    replace(main, h('h2', {}, 'Backups'),
      h('p', { class: 'buttons' }, actionButton('Start a backup run', () => ({ title: 'Start a backup run?',
        words: "Back up the stage's selection of tables now.", ok: 'Start the run' }), () => api('POST', 'backups', {}),
      (started) => { location.hash = '#/run/' + encodeURIComponent(started.run_id); }, 'primary')),
      h('h3', {}, 'Recent runs'),
      table(['run', 'status', 'trigger', 'started', 'finished', 'tables', 'summary'], runList.map((r) => [
        link('#/run/' + encodeURIComponent(r.run_id), r.run_id), status(r.status), text(r.trigger), when(r.started_at), when(r.finished_at),
        text(r.table_count), summaryText(r.summary)]), 'No backup run yet.'),
      h('h3', {}, 'Restores'),
      table(['restore', 'status', 'from', 'into', 'requested', 'finished', 'progress', 'error'], restoreList.map((r) => [
        link('#/restore/' + encodeURIComponent(r.restore_id), r.restore_id), status(r.status), text(r.table), text(r.target),
        when(r.requested_at), when(r.finished_at), progress(r), text(r.error)]), 'No restore yet.'),
      h('h3', {}, 'Catalog'), filter, catalogPart);
    if (runList.some((r) => r.status !== 'COMPLETE') || restoreList.some((r) => r.status === 'RESTORING')) poll();
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
    $('sign-in').hidden = false;
    $('sign-out').hidden = true;
    $('sign-in-why').textContent = why;
    $('notice').replaceChildren();
    replace($('main'), h('p', { class: 'muted' }, 'Signed out: nothing is shown until the API accepts a token.'));
    say('');
    $('token').focus();
  }

  async function render() {
    clearTimeout(pollTimer);
    const mine = ++renderCount;
    const live = () => mine === renderCount;
    const poll = () => { if (live()) pollTimer = setTimeout(() => { if (live()) render(); }, POLL_MS); };
    const { name, parts, params } = routeOf(location.hash);
    const view = { task: 'tasks', source: 'tasks', run: 'backups', restore: 'backups' }[name] || name;
    for (const a of document.querySelectorAll('nav a')) {
      if (a.dataset.view === view) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
    }
    const main = $('main');
    if (!sessionStorage.getItem(TOKEN_KEY)) { showSignIn('Type the API token once; it is kept in this tab only.'); return; }
    $('sign-in').hidden = true;
    $('sign-out').hidden = false;
    if (!main.firstChild || main.dataset.view !== view) replace(main, h('p', {}, 'Loading…'));
    main.dataset.view = view;
    say('Loading…');
    try {
      if (name === 'now') await nowView(main, live);
      else if (name === 'tasks') await tasksView(main, live, params);
      else if (name === 'task') await taskView(main, live, 'tasks/' + encodeURIComponent(parts[1] || ''));
      else if (name === 'source') await taskView(main, live, 'tasks/' + encodeURIComponent(parts[1] || '') + '/' + encodeURIComponent(parts.slice(2).join('/')));
      else if (name === 'search') await searchView(main, live, params);
      else if (name === 'lateness') await latenessView(main, live);
      else if (name === 'backups') await backupsView(main, live, params, poll);
      else if (name === 'run') await runView(main, live, parts[1] || '', poll);
      else if (name === 'restore') await restoreView(main, live, parts[1] || '', poll);
      else replace(main, message('error', 'No such view: ' + name + '.'), link('#/now', 'Now'));
      if (live()) say('Updated ' + new Date().toLocaleTimeString() + '.');
    } catch (failure) {
      if (!live()) return;
      if (failure instanceof SignedOut) { showSignIn(failure.message); return; }
      if (failure instanceof ApiError && (failure.status === 401 || failure.status === 403)) {
        forget();
        showSignIn('Unauthorized: ' + failure.words());
        return;
      }
      replace(main, failureMessage(failure));
      say('');
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
    render();
  });
})();
