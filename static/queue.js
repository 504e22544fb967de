/*
 * Wicket queue page. Plain script, no build step.
 *
 * The edge renders the page with the visitor's figures already in it (edge/src/room/page.rs), in the
 * language it chose (?lang=, the wicket_lang cookie, Accept-Language), and puts that language's message
 * catalogue (static/i18n/<lang>.json, with the operator's overrides) in <script id="wicket-text">. This
 * script keeps the page current with the same catalogue and the same wording rules as the server.
 *
 * Flow: room from the path /queue/<room> → a place at the first arrival → (bot check if the room asks,
 * solved in the background while the fan waits — the status says `proof_owed` until it is given; the
 * place is admitted at its turn only once it is: proof-of-work by static/pow.js, or
 * CAPTCHA, then POST join) → status by server-sent events on /queue/<room>/events, or by polling
 * /queue/<room>/status at the server's poll_after_ms when SSE is unavailable → on "admitted", go to
 * `redirect`. Before opening, a countdown to the status's `opens_at` runs on the server's clock.
 *
 * The pure parts (wording, room from the path, redirect check) are exported for node when `module`
 * exists, so they can be tested without a browser.
 */
(function (root) {
  'use strict';

  // ------------------------------------------------------------------------------------------------
  // Text: the catalogue the page carries; the same rules as edge/src/i18n.rs.
  // ------------------------------------------------------------------------------------------------

  function fill(text, args) {
    var out = String(text == null ? '' : text);
    for (var k in args) if (Object.prototype.hasOwnProperty.call(args, k)) out = out.split('{' + k + '}').join(String(args[k]));
    return out;
  }

  // The page's language is the catalogue's "@lang" (the server puts it there).
  var GROUP = { de: '.', es: '.', id: '.', it: '.', nl: '.', 'pt-BR': '.', tr: '.', fr: '\u202f', pl: '\u00a0', ru: '\u00a0' };

  /** A whole number in Western digits, grouped by three as the page's language does (es and pl leave 4 digits). */
  function number(n, T) {
    var lang = T && T['@lang'], s = String(Math.max(0, Math.round(Number(n) || 0)));
    var sep = Object.prototype.hasOwnProperty.call(GROUP, lang) ? GROUP[lang] : ',';
    return s.length < (lang === 'es' || lang === 'pl' ? 5 : 4) ? s : s.replace(/\B(?=(\d{3})+(?!\d))/g, sep);
  }

  /** CLDR plural category of a whole number in a language (the rules of Lang::plural). */
  function plural(lang, n) {
    var n10 = n % 10, n100 = n % 100, few = n10 >= 2 && n10 <= 4 && (n100 < 12 || n100 > 14);
    switch (lang) {
      case 'ru': return n10 === 1 && n100 !== 11 ? 'one' : few ? 'few' : 'many';
      case 'pl': return n === 1 ? 'one' : few ? 'few' : 'many';
      case 'ar': return n === 0 ? 'zero' : n === 1 ? 'one' : n === 2 ? 'two' : n100 >= 3 && n100 <= 10 ? 'few' : n100 >= 11 ? 'many' : 'other';
      case 'fr': case 'pt-BR': case 'fa': return n <= 1 ? 'one' : 'other';
      case 'ja': case 'ko': case 'zh-CN': case 'zh-TW': case 'id': return 'other';
      default: return n === 1 ? 'one' : 'other';
    }
  }

  /** The text of `key` in the plural form for `count` (`key#category` when the catalogue has it), filled. */
  function fillCount(T, key, count, args) {
    var v = T[key + '#' + plural(T['@lang'], count)];
    return fill(typeof v === 'string' ? v : T[key], args);
  }

  /** The tickets left as a sentence for the screen reader ("About 1,200 tickets left"). */
  function ticketsText(T, n) {
    return fillCount(T, 'announce_tickets', n, { n: number(n, T) });
  }

  /** How fast people are let in; below one a second "one person every N seconds". Empty when none. */
  function rateText(T, r) {
    if (typeof r !== 'number' || !isFinite(r) || r <= 0) return '';
    if (r >= 1.5) return fillCount(T, 'rate_many', Math.round(r), { n: number(Math.round(r), T) });
    if (r >= 0.75) return T.rate_one;
    var every = 1 / r;
    var s = every < 10 ? Math.max(2, Math.round(every)) : Math.round(every / 5) * 5, m = Math.max(2, Math.round(every / 60));
    if (every < 90) return fillCount(T, 'rate_every_seconds', s, { s: s });
    return fillCount(T, 'rate_every_minutes', m, { m: m });
  }

  /** ETA band text from {"low","high"} seconds. */
  function etaText(T, eta) {
    if (!eta || typeof eta.low !== 'number' || typeof eta.high !== 'number') return T.eta_unknown;
    var lo = Math.max(0, eta.low), hi = Math.max(lo, eta.high);
    if (hi < 60) return T.eta_soon;
    var keys, a, b;
    if (hi < 90 * 60) {
      keys = ['eta_minute', 'eta_minutes', 'eta_minutes_range'];
      a = Math.max(1, Math.floor(lo / 60)); b = Math.max(a, Math.ceil(hi / 60));
    } else {
      keys = ['eta_hour', 'eta_hours', 'eta_hours_range'];
      a = Math.max(1, Math.floor(lo / 3600)); b = Math.max(a, Math.ceil(hi / 3600));
    }
    if (a === 1 && b === 1) return T[keys[0]];
    if (a === b) return fillCount(T, keys[1], a, { a: a });
    return fillCount(T, keys[2], b, { a: a, b: b });
  }

  function pad2(n) { return (n < 10 ? '0' : '') + n; }

  /** Time left until opening as [N d ]HH:MM:SS. */
  function countdownText(T, seconds) {
    var s = Math.max(0, Math.floor(seconds));
    var d = Math.floor(s / 86400), rest = s % 86400;
    var time = pad2(Math.floor(rest / 3600)) + ':' + pad2(Math.floor(rest % 3600 / 60)) + ':' + pad2(rest % 60);
    return d === 0 ? time : fillCount(T, 'countdown_days', d, { d: d, time: time });
  }

  /** Catalogue keys of the headline and detail for a status. */
  function headlineKeys(s) {
    var forNow = s.state === 'sold_out' && s.restock_possible === true;
    switch (s.state) {
      case 'waiting': return ['title_waiting', 'detail_waiting'];
      case 'not_open': return ['title_not_open', typeof s.ahead === 'number' ? 'detail_not_open' : 'detail_not_open_drawn'];
      case 'paused': return ['title_paused', 'detail_paused'];
      case 'sold_out': return forNow ? ['title_sold_out_for_now', 'detail_sold_out_for_now'] : ['title_sold_out', 'detail_sold_out'];
      case 'closed': return ['title_closed', 'detail_closed'];
      case 'stopped': return ['title_stopped', 'detail_stopped'];
      case 'admitted': return ['title_admitted', 'detail_admitted'];
      default: return ['title_error', 'detail_error'];
    }
  }

  var api = {
    fill: fill, number: number, plural: plural, fillCount: fillCount, ticketsText: ticketsText, rateText: rateText, etaText: etaText, countdownText: countdownText,
    headlineKeys: headlineKeys, roomFromPath: roomFromPath, safeRedirect: safeRedirect
  };

  /** The room id from /queue/<room>[/...]; null when the path is not a queue path. */
  function roomFromPath(path) {
    var m = /^\/queue\/([^/?#]+)/.exec(path || '');
    if (!m) return null;
    var room;
    try { room = decodeURIComponent(m[1]); } catch (e) { return null; }
    return /^[A-Za-z0-9._~-]{1,128}$/.test(room) ? room : null;
  }

  /** Only same-origin targets are followed automatically; anything else needs the user's click. */
  function safeRedirect(target, origin) {
    if (typeof target !== 'string' || !target) return null;
    try {
      var u = new URL(target, origin);
      if (u.origin !== origin || (u.protocol !== 'http:' && u.protocol !== 'https:')) return null;
      return u.href;
    } catch (e) { return null; }
  }

  if (typeof module !== 'undefined' && module.exports) {
    module.exports = api;
  }
  if (typeof document === 'undefined') return;

  // ------------------------------------------------------------------------------------------------
  // Page
  // ------------------------------------------------------------------------------------------------

  var $ = function (id) { return document.getElementById(id); };
  var room = roomFromPath(location.pathname);
  var base = room ? '/queue/' + encodeURIComponent(room) : null;
  var session = (function () { try { return root.sessionStorage; } catch (e) { return null; } })();
  var lang = document.documentElement.lang || 'en';
  var T = (function () {
    try { return JSON.parse($('wicket-text').textContent) || {}; } catch (e) { return {}; }
  })();
  var last = null;           // last status JSON
  var finished = false;      // admitted / sold out / closed: stop talking to the server
  var source = null;         // EventSource
  var pollTimer = null;
  var failures = 0;
  var lastAnnounce = { at: 0, state: null };
  var checkRunning = false;
  var checkBackground = false;
  var proofGiven = false;
  // The server's clock minus ours, so the countdown ends when the room opens, whatever the phone says.
  var clockOffset = (function () {
    var now = Number(meta('wicket-now'));
    return isFinite(now) && now > 0 ? now * 1000 - Date.now() : 0;
  })();
  var countdownTimer = null;

  function meta(name) {
    var el = document.querySelector('meta[name="' + name + '"]');
    return el ? (el.getAttribute('content') || '').trim() : '';
  }

  function announce(text, urgent) {
    var el = $(urgent ? 'announce-now' : 'announce');
    el.textContent = '';
    // A fresh text node after a tick so screen readers notice a repeat.
    setTimeout(function () { el.textContent = text; }, 50);
  }

  function setHeadline(titleKey, detailKey) {
    $('headline').textContent = T[titleKey];
    $('detail').textContent = T[detailKey];
    document.title = T[titleKey] + ' · ' + (meta('wicket-brand') || T.brand);
  }

  function progressFraction(s) {
    if (typeof s.ahead !== 'number' || !session) return null;
    var key = 'wicket_first_ahead_' + room;
    var first = Number(session.getItem(key));
    if (!first || s.ahead > first) { first = Math.max(1, s.ahead); session.setItem(key, String(first)); }
    return Math.max(0, Math.min(1, 1 - s.ahead / first));
  }

  /**
   * `2026-12-01 10:00 (UTC+08:00)`: the time `at` (Unix ms) in the fan's own time zone, in the form
   * the server writes for the audience's offset (`[edge.queue-page] utc-offset`) on a page without
   * JavaScript. Digits only: no language's words, no Intl.
   */
  function localTime(at) {
    var d = new Date(at);
    var p = function (n) { return (n < 10 ? '0' : '') + n; };
    var off = -d.getTimezoneOffset();
    var a = Math.abs(off);
    return d.getFullYear() + '-' + p(d.getMonth() + 1) + '-' + p(d.getDate()) + ' ' + p(d.getHours()) + ':' +
      p(d.getMinutes()) + ' (UTC' + (off < 0 ? '-' : '+') + p(Math.floor(a / 60)) + ':' + p(a % 60) + ')';
  }

  /** Counts down to `opensAt` (RFC 3339) on the server's clock; asks for a status when it is time. */
  function runCountdown(opensAt) {
    var at = Date.parse(opensAt);
    if (countdownTimer) { clearInterval(countdownTimer); countdownTimer = null; }
    if (!isFinite(at)) return;
    // The opening in the fan's own zone, under the UTC one.
    if ($('opens-at-local')) $('opens-at-local').textContent = localTime(at);
    var el = $('countdown');
    var tick = function () {
      var left = Math.ceil((at - (Date.now() + clockOffset)) / 1000);
      el.textContent = countdownText(T, left);
      if (left <= 0) {
        clearInterval(countdownTimer);
        countdownTimer = null;
        // The stream sends the opening within a second; a poller asks now.
        if (!source && !finished) poll(0);
      }
    };
    tick();
    countdownTimer = setInterval(tick, 1000);
  }

  /** People ahead and the wait, then the tickets left when the status knows them: what is announced. */
  function position(s) {
    var text = fillCount(T, 'announce_position', s.ahead, { ahead: number(s.ahead, T), eta: etaText(T, s.eta_seconds) });
    return typeof s.tickets_left === 'number' ? text + '. ' + ticketsText(T, s.tickets_left) : text;
  }

  function render(s, quiet) {
    last = s;
    var state = s.state;
    // Sold out for now (unpaid holds may still return): the place is kept and polling goes on.
    var forNow = state === 'sold_out' && s.restock_possible === true;
    var show = state === 'waiting' || state === 'not_open' || state === 'paused' || forNow;
    var keys = headlineKeys(s);
    setHeadline(keys[0], keys[1]);
    $('queue').hidden = !show;
    $('queue').setAttribute('data-state', state);

    if (show) {
      var hasAhead = typeof s.ahead === 'number';
      $('ahead-box').hidden = !hasAhead;
      if (hasAhead) $('ahead').textContent = fill(T.people, { n: number(s.ahead, T) });
      // The tickets left beside them (the status rounds the figure down; absent until the core answers).
      var hasTickets = typeof s.tickets_left === 'number';
      $('tickets-box').hidden = !hasTickets;
      if (hasTickets) $('tickets').textContent = fill(T.tickets_about, { n: number(s.tickets_left, T) });
      var eta = state === 'waiting' ? etaText(T, s.eta_seconds) : state === 'paused' ? T.eta_paused : '';
      $('eta-box').hidden = !eta;
      $('eta').textContent = eta;
      var notOpen = state === 'not_open';
      $('opening').hidden = !notOpen;
      if (notOpen && typeof s.opens_at === 'string') {
        $('countdown').setAttribute('data-opens-at', s.opens_at);
        if (!countdownTimer || $('countdown').getAttribute('data-running') !== s.opens_at) {
          $('countdown').setAttribute('data-running', s.opens_at);
          runCountdown(s.opens_at);
        }
      } else if (countdownTimer) { clearInterval(countdownTimer); countdownTimer = null; }
      var p = notOpen ? null : progressFraction(s);
      $('progress').hidden = p === null;
      var pct = p === null ? 0 : Math.round(p * 100);
      $('fill').style.width = pct + '%';
      $('bar').setAttribute('aria-valuenow', String(pct));
      $('percent').textContent = pct + '%';
      $('rate').textContent = state === 'waiting' ? rateText(T, s.release_per_second) : '';
    }

    if (quiet) return;
    var now = Date.now();
    if (state !== lastAnnounce.state || forNow !== !!lastAnnounce.forNow) {
      var urgent = state === 'admitted';
      announce($('headline').textContent + (show && typeof s.ahead === 'number' && state === 'waiting'
        ? '. ' + position(s) : ''), urgent);
      lastAnnounce = { at: now, state: state, forNow: forNow };
    } else if (state === 'waiting' && now - lastAnnounce.at > 60000 && typeof s.ahead === 'number') {
      // Position updates at most once a minute: a live region that talks every poll is unusable.
      announce(position(s), false);
      lastAnnounce.at = now;
    }

    if (state === 'admitted') admitted(s);
    if (state === 'admitted' || (state === 'sold_out' && !forNow) || state === 'closed') finish();
  }

  function admitted(s) {
    var target = safeRedirect(s.redirect, location.origin);
    var link = $('go-link');
    if (target) {
      link.href = target;
      $('go').hidden = false;
      // Give the assertive announcement a moment, then go.
      setTimeout(function () { location.assign(target); }, 400);
    } else if (typeof s.redirect === 'string' && /^https?:\/\//i.test(s.redirect)) {
      link.href = s.redirect;
      $('go').hidden = false;
      $('detail').textContent = T.detail_admitted_link;
    }
  }

  function finish() {
    finished = true;
    if (source) { source.close(); source = null; }
    if (pollTimer) { clearTimeout(pollTimer); pollTimer = null; }
    if (countdownTimer) { clearInterval(countdownTimer); countdownTimer = null; }
    $('conn').textContent = '';
  }

  function showError() {
    if (last) return; // keep showing the last known place; the next answer will correct it
    setHeadline('title_error', 'detail_error');
  }

  // --- answers -------------------------------------------------------------------------------------

  /** Handles a JSON answer of join/status. Returns true when it was a status. */
  function handleAnswer(status, body) {
    if (body && typeof body.state === 'string') {
      failures = 0;
      render(body);
      // The place is held from the first arrival; the room's check is still owed: it is given in the
      // background while the fan waits (the place is admitted at its turn only once it is given).
      // (An event stream opened before the proof still says so: once given, it is not given again.)
      if ((body.proof_owed === 'pow' || body.proof_owed === 'captcha') && !proofGiven) runCheck(body.proof_owed, body, true);
      return true;
    }
    // The room wants a bot check before it gives a place (or the ticket is missing or refused).
    if (body && (body.bot_check === 'pow' || body.bot_check === 'captcha')) {
      runCheck(body.bot_check, body);
      return false;
    }
    if (status === 401 || status === 403 || status === 404) {
      // No (valid) ticket: join, through the room's check when the page was told about one.
      var check = meta('wicket-bot-check');
      if (check === 'pow' || check === 'captcha') runCheck(check, body || {});
      else join({});
      return false;
    }
    return false;
  }

  /** True when handleAnswer started a join or a check for this answer (it restarts updates itself). */
  function joinUnderWay(status, body) {
    return !!(body && (body.bot_check === 'pow' || body.bot_check === 'captcha')) ||
      status === 401 || status === 403 || status === 404;
  }

  function getJSON(url) {
    return fetch(url, {
      headers: { Accept: 'application/json' }, credentials: 'same-origin', cache: 'no-store'
    }).then(function (r) {
      return r.json().catch(function () { return null; }).then(function (b) { return { status: r.status, body: b, r: r }; });
    });
  }

  function postJSON(url, payload) {
    return fetch(url, {
      method: 'POST', credentials: 'same-origin', cache: 'no-store',
      headers: { Accept: 'application/json', 'Content-Type': 'application/json' },
      body: JSON.stringify(payload)
    }).then(function (r) {
      return r.json().catch(function () { return null; }).then(function (b) { return { status: r.status, body: b, r: r }; });
    });
  }

  // --- status: SSE first, polling as the fallback ------------------------------------------------

  function startUpdates() {
    if (finished) return;
    if (typeof root.EventSource === 'function' && failures < 3) {
      try {
        source = new root.EventSource(base + '/events', { withCredentials: true });
      } catch (e) { source = null; }
    }
    if (!source) return poll(0);
    var opened = false;
    $('conn').textContent = T.conn_sse;
    var onData = function (ev) {
      var data;
      try { data = JSON.parse(ev.data); } catch (e) { return; }
      opened = true;
      if (!handleAnswer(200, data) && source) { source.close(); source = null; }
    };
    source.onmessage = onData;
    source.addEventListener('status', onData);
    source.onerror = function () {
      // EventSource retries by itself; if it never delivered, or keeps failing, fall back to polling.
      failures++;
      if (!opened || failures >= 3) {
        if (source) { source.close(); source = null; }
        if (!finished) poll(0);
      }
    };
  }

  function poll(delay) {
    if (finished) return;
    if (pollTimer) clearTimeout(pollTimer);
    $('conn').textContent = T.conn_poll;
    pollTimer = setTimeout(function () {
      pollTimer = null;
      getJSON(base + '/status').then(function (a) {
        if (a.status === 429) {
          var ra = Number(a.r.headers.get('Retry-After'));
          return poll(backoff(isFinite(ra) && ra > 0 ? ra * 1000 : null));
        }
        if (!handleAnswer(a.status, a.body)) {
          if (joinUnderWay(a.status, a.body)) return; // it restarts the updates itself
          failures++;
          showError();
          return poll(backoff(null));
        }
        var next = Number(a.body.poll_after_ms);
        poll(isFinite(next) && next > 0 ? Math.min(next, 120000) : 5000);
      }, function () {
        failures++;
        showError();
        poll(backoff(null));
      });
    }, delay);
  }

  /** Retry delay after a failure: the server's Retry-After, else exponential with full jitter. */
  function backoff(serverMs) {
    if (serverMs) return Math.min(serverMs, 120000);
    var cap = Math.min(60000, 1000 * Math.pow(2, Math.min(failures, 6)));
    return 1000 + Math.random() * cap;
  }

  // --- join and the bot checks -------------------------------------------------------------------

  function join(payload) {
    if (finished) return;
    return postJSON(base + '/join', payload).then(function (a) {
      if (a.status === 429) {
        var ra = Number(a.r.headers.get('Retry-After'));
        return setTimeout(function () { join(payload); }, backoff(isFinite(ra) && ra > 0 ? ra * 1000 : null));
      }
      if (a.body && typeof a.body.state === 'string') {
        handleAnswer(a.status, a.body);
        if (!finished) startUpdates();
        return;
      }
      if (a.body && (a.body.bot_check === 'pow' || a.body.bot_check === 'captcha')) {
        return runCheck(a.body.bot_check, a.body);
      }
      failures++;
      showError();
      setTimeout(function () { join(payload); }, backoff(null));
    }, function () {
      failures++;
      showError();
      setTimeout(function () { join(payload); }, backoff(null));
    });
  }

  /** Runs the room's check. `background`: the fan holds a place already (the status answer said
   *  `proof_owed`): the status updates go on while it runs. */
  function runCheck(kind, hints, background) {
    if (checkRunning || finished) return;
    checkRunning = true;
    checkBackground = !!background;
    if (!background) {
      if (source) { source.close(); source = null; }
      if (pollTimer) { clearTimeout(pollTimer); pollTimer = null; }
    }
    $('check').hidden = false;
    if (kind === 'captcha') return runCaptcha(hints || {});
    var c = hints && hints.challenge;
    return runPow(0, c && typeof c.challenge === 'string' && typeof c.difficulty === 'number' ? c : null);
  }

  /** After a check's answer: the status, and the updates again unless they never stopped. */
  function checkAnswered(a) {
    var background = checkBackground;
    checkDone();
    if (a.body && !a.body.proof_owed) proofGiven = true;
    handleAnswer(a.status, a.body);
    if (!finished && !background) startUpdates();
  }

  function checkDone() {
    checkRunning = false;
    $('check').hidden = true;
  }

  function runPow(attempt, given) {
    $('check-text').textContent = attempt ? T.pow_failed : T.pow_running;
    // A challenge that came with the status answer saves a round trip.
    (given ? Promise.resolve({ status: 200, body: given }) : getJSON(base + '/challenge')).then(function (a) {
      var c = a.body;
      if (!c || typeof c.challenge !== 'string' || typeof c.difficulty !== 'number') throw new Error('bad challenge');
      // The one solver of static/pow.js, which the page loads first.
      if (!root.WicketPow) throw new Error('pow.js did not load');
      return root.WicketPow.solveAsync(c.challenge, c.difficulty, function (n) {
        $('check-text').textContent = fillCount(T, 'pow_progress', n, { n: number(n, T) });
      }, function () { return finished; }).then(function (nonce) {
        if (nonce === null) return null;
        return postJSON(base + '/join', { pow: { challenge: c.challenge, nonce: nonce } });
      });
    }).then(function (a) {
      if (!a) return;
      if (a.body && typeof a.body.state === 'string') {
        checkAnswered(a);
        return;
      }
      throw new Error('refused');
    }).catch(function () {
      // An expired challenge or a busy edge: a new challenge, after a pause that grows.
      failures++;
      setTimeout(function () { runPow(attempt + 1); }, backoff(null));
    });
  }

  function runCaptcha(hints) {
    var texts = T;
    var script = hints.captcha_script || meta('wicket-captcha-script');
    var sitekey = hints.captcha_sitekey || meta('wicket-captcha-sitekey');
    var cls = hints.captcha_class || meta('wicket-captcha-class') || 'cf-turnstile';
    var slot = $('captcha-slot');
    // Sites may render their own widget into #captcha-slot and call wicketCaptchaDone(token) themselves.
    root.wicketCaptchaDone = function (token) {
      if (typeof token !== 'string' || !token) return;
      postJSON(base + '/join', { captcha: token }).then(function (a) {
        if (a.body && typeof a.body.state === 'string') {
          slot.textContent = '';
          checkAnswered(a);
        } else {
          $('check-text').textContent = texts.pow_failed;
          if (root.turnstile && root.turnstile.reset) try { root.turnstile.reset(); } catch (e) { /* widget gone */ }
          if (root.hcaptcha && root.hcaptcha.reset) try { root.hcaptcha.reset(); } catch (e) { /* widget gone */ }
          if (root.grecaptcha && root.grecaptcha.reset) try { root.grecaptcha.reset(); } catch (e) { /* widget gone */ }
        }
      }, function () {
        $('check-text').textContent = T.detail_error;
      });
    };
    if (!script || !sitekey) {
      if (!slot.firstChild) $('check-text').textContent = texts.captcha_missing;
      else $('check-text').textContent = texts.captcha_prompt;
      return;
    }
    $('check-text').textContent = texts.captcha_prompt;
    var widget = document.createElement('div');
    widget.className = cls;
    widget.setAttribute('data-sitekey', sitekey);
    widget.setAttribute('data-callback', 'wicketCaptchaDone');
    widget.setAttribute('data-language', lang.toLowerCase());
    slot.textContent = '';
    slot.appendChild(widget);
    var s = document.createElement('script');
    s.src = script;
    s.async = true;
    s.onerror = function () { $('check-text').textContent = texts.captcha_missing; };
    document.head.appendChild(s);
  }

  // --- start ---------------------------------------------------------------------------------------

  function start() {
    if (!room) { setHeadline('title_error', 'detail_error'); return; }
    // The page came with the opening time: count down at once, before the first status.
    var opensAt = $('countdown') && $('countdown').getAttribute('data-opens-at');
    if (opensAt && !$('opening').hidden) {
      $('countdown').setAttribute('data-running', opensAt);
      runCountdown(opensAt);
    }
    // One status first: a visitor who already holds a ticket (reload, second tab) keeps the place and
    // does not solve a new check; one without gets joined (through the check) by handleAnswer.
    getJSON(base + '/status').then(function (a) {
      if (handleAnswer(a.status, a.body)) startUpdates();
      else if (!joinUnderWay(a.status, a.body)) { failures++; showError(); poll(backoff(null)); }
    }, function () { failures++; showError(); poll(backoff(null)); });
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})(typeof window !== 'undefined' ? window : globalThis);
