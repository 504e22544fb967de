/*
 * Wicket queue page. Plain script, no build step.
 *
 * Flow: room from the path /queue/<room> → (bot check if the room asks: proof-of-work or CAPTCHA, then
 * POST join) → status by server-sent events on /queue/<room>/events, or by polling /queue/<room>/status
 * at the server's poll_after_ms when SSE is unavailable → on "admitted", go to `redirect`.
 *
 * The pure parts (language choice, ETA text, leading-zero count, SHA-256, proof-of-work) are exported
 * for node when `module` exists, so they can be tested without a browser.
 */
(function (root) {
  'use strict';

  // ------------------------------------------------------------------------------------------------
  // Text
  // ------------------------------------------------------------------------------------------------

  var TEXT = {
    'zh-CN': {
      brand: '排队中',
      doc_title: '排队中',
      title_waiting: '您正在排队',
      detail_waiting: '请勿刷新或关闭本页，轮到您时会自动进入。',
      title_not_open: '尚未开始',
      detail_not_open: '活动尚未开始，您已进入排队，开始后按顺序放行。',
      title_paused: '排队暂停中',
      detail_paused: '放行暂时暂停，您的位置会保留。',
      title_admitted: '轮到您了！',
      detail_admitted: '正在为您跳转…',
      detail_admitted_link: '请点击下方按钮进入。',
      title_sold_out: '已售罄',
      detail_sold_out: '很抱歉，本场已全部售出。',
      title_sold_out_for_now: '暂时售罄',
      detail_sold_out_for_now: '还有订单未付款，超时未付的票会重新放出。请保持本页打开，您的位置会保留。',
      title_closed: '已结束',
      detail_closed: '本场活动已结束。',
      title_error: '连接中断',
      detail_error: '正在重新连接，您的位置会保留。',
      position: '您的位置',
      ahead: '前面还有',
      eta: '预计等待',
      progress: '排队进度',
      people: function (n) { return fmt(n, 'zh-CN') + ' 人'; },
      eta_soon: '不到 1 分钟',
      eta_minutes: function (a, b) { return a === b ? '约 ' + a + ' 分钟' : '约 ' + a + '–' + b + ' 分钟'; },
      eta_hours: function (a, b) { return a === b ? '约 ' + a + ' 小时' : '约 ' + a + '–' + b + ' 小时'; },
      eta_unknown: '正在估算…',
      rate: function (r) { return '当前每秒放行约 ' + fmt(r, 'zh-CN') + ' 人'; },
      check_title: '安全验证',
      pow_running: '正在验证您的浏览器，通常只需几秒…',
      pow_progress: function (n) { return '正在验证您的浏览器… 已计算 ' + fmt(n, 'zh-CN') + ' 次'; },
      pow_failed: '验证失败，正在重试…',
      captcha_prompt: '请完成下方验证后加入排队。',
      captcha_missing: '需要人机验证，但验证组件未能加载。请稍后刷新本页。',
      go_now: '立即进入',
      conn_sse: '实时更新',
      conn_poll: '定时刷新',
      announce_position: function (ahead, eta) { return '前面还有 ' + fmt(ahead, 'zh-CN') + ' 人，' + eta; }
    },
    en: {
      brand: 'Waiting room',
      doc_title: 'Waiting room',
      title_waiting: 'You are in line',
      detail_waiting: 'Keep this page open. When it is your turn you will be let in automatically.',
      title_not_open: 'Not open yet',
      detail_not_open: 'The sale has not started. You are in line and will be let in in order once it opens.',
      title_paused: 'The line is paused',
      detail_paused: 'Letting people in is paused for a moment. You keep your place.',
      title_admitted: 'It is your turn!',
      detail_admitted: 'Taking you there…',
      detail_admitted_link: 'Use the button below to continue.',
      title_sold_out: 'Sold out',
      detail_sold_out: 'Sorry, everything has been sold.',
      title_sold_out_for_now: 'Sold out for now',
      detail_sold_out_for_now: 'Some orders are not paid yet; their tickets return to sale if the payment times out. Keep this page open: your place is kept.',
      title_closed: 'The sale has ended',
      detail_closed: 'This sale is over.',
      title_error: 'Connection lost',
      detail_error: 'Reconnecting. You keep your place.',
      position: 'Your place',
      ahead: 'People ahead',
      eta: 'Estimated wait',
      progress: 'Progress',
      people: function (n) { return fmt(n, 'en'); },
      eta_soon: 'less than a minute',
      eta_minutes: function (a, b) { return a === b ? 'about ' + a + (a === 1 ? ' minute' : ' minutes') : 'about ' + a + '–' + b + ' minutes'; },
      eta_hours: function (a, b) { return a === b ? 'about ' + a + (a === 1 ? ' hour' : ' hours') : 'about ' + a + '–' + b + ' hours'; },
      eta_unknown: 'estimating…',
      rate: function (r) { return 'Letting in about ' + fmt(r, 'en') + ' people a second'; },
      check_title: 'Security check',
      pow_running: 'Checking your browser; this usually takes a few seconds…',
      pow_progress: function (n) { return 'Checking your browser… ' + fmt(n, 'en') + ' tries'; },
      pow_failed: 'The check failed; trying again…',
      captcha_prompt: 'Please complete the check below to join the line.',
      captcha_missing: 'A human check is required but could not be loaded. Please reload this page later.',
      go_now: 'Continue',
      conn_sse: 'live',
      conn_poll: 'refreshing',
      announce_position: function (ahead, eta) { return fmt(ahead, 'en') + ' people ahead of you, ' + eta; }
    }
  };
  var LANGS = ['zh-CN', 'en'];

  function fmt(n, lang) {
    try { return Number(n).toLocaleString(lang, { maximumFractionDigits: 0 }); } catch (e) { return String(Math.round(n)); }
  }

  /** The page language: a saved choice, else the first of the browser's languages we have, else English. */
  function pickLanguage(saved, browserLangs) {
    if (saved && LANGS.indexOf(saved) >= 0) return saved;
    var list = browserLangs || [];
    for (var i = 0; i < list.length; i++) {
      var l = String(list[i] || '').toLowerCase();
      if (l.indexOf('zh') === 0) return 'zh-CN';
      if (l.indexOf('en') === 0) return 'en';
    }
    return 'en';
  }

  /** ETA band text from {"low","high"} seconds. */
  function etaText(t, eta) {
    if (!eta || typeof eta.low !== 'number' || typeof eta.high !== 'number' || eta.high < 0) return t.eta_unknown;
    var lo = Math.max(0, eta.low), hi = Math.max(lo, eta.high);
    if (hi < 60) return t.eta_soon;
    if (hi < 90 * 60) {
      var a = Math.max(1, Math.floor(lo / 60)), b = Math.max(a, Math.ceil(hi / 60));
      return t.eta_minutes(a, b);
    }
    var h1 = Math.max(1, Math.floor(lo / 3600)), h2 = Math.max(h1, Math.ceil(hi / 3600));
    return t.eta_hours(h1, h2);
  }

  // ------------------------------------------------------------------------------------------------
  // Proof-of-work: find a nonce so that sha256(challenge + nonce) starts with `difficulty` zero bits.
  // WebCrypto when the page is a secure context; a small pure-JS SHA-256 otherwise (plain http on a LAN).
  // ------------------------------------------------------------------------------------------------

  // What goes between challenge and nonce in the hashed string: nothing, as the edge verifies it
  // (edge/src/bot.rs `ProofOfWork::verify`, shared by the room join and static/pow.js).
  var POW_SEPARATOR = '';

  function leadingZeroBits(bytes) {
    var n = 0;
    for (var i = 0; i < bytes.length; i++) {
      var b = bytes[i];
      if (b === 0) { n += 8; continue; }
      for (var m = 0x80; m && !(b & m); m >>= 1) n++;
      break;
    }
    return n;
  }

  var K = [
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2
  ];

  function utf8(s) {
    if (typeof TextEncoder !== 'undefined') return new TextEncoder().encode(s);
    var out = [], e = unescape(encodeURIComponent(s));
    for (var i = 0; i < e.length; i++) out.push(e.charCodeAt(i));
    return new Uint8Array(out);
  }

  /** SHA-256 of bytes, pure JS (FIPS 180-4). */
  function sha256(msg) {
    var len = msg.length, withPad = ((len + 9 + 63) >> 6) << 6;
    var buf = new Uint8Array(withPad);
    buf.set(msg);
    buf[len] = 0x80;
    var bits = len * 8;
    buf[withPad - 4] = (bits >>> 24) & 0xff;
    buf[withPad - 3] = (bits >>> 16) & 0xff;
    buf[withPad - 2] = (bits >>> 8) & 0xff;
    buf[withPad - 1] = bits & 0xff;
    buf[withPad - 5] = Math.floor(len / 0x20000000) & 0xff;
    var h0 = 0x6a09e667, h1 = 0xbb67ae85, h2 = 0x3c6ef372, h3 = 0xa54ff53a,
        h4 = 0x510e527f, h5 = 0x9b05688c, h6 = 0x1f83d9ab, h7 = 0x5be0cd19;
    var w = new Int32Array(64);
    for (var off = 0; off < withPad; off += 64) {
      for (var i = 0; i < 16; i++) {
        var j = off + i * 4;
        w[i] = (buf[j] << 24) | (buf[j + 1] << 16) | (buf[j + 2] << 8) | buf[j + 3];
      }
      for (i = 16; i < 64; i++) {
        var x = w[i - 15], y = w[i - 2];
        var s0 = ((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3);
        var s1 = ((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10);
        w[i] = (w[i - 16] + s0 + w[i - 7] + s1) | 0;
      }
      var a = h0, b = h1, c = h2, d = h3, e = h4, f = h5, g = h6, h = h7;
      for (i = 0; i < 64; i++) {
        var S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
        var ch = (e & f) ^ (~e & g);
        var t1 = (h + S1 + ch + K[i] + w[i]) | 0;
        var S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
        var maj = (a & b) ^ (a & c) ^ (b & c);
        var t2 = (S0 + maj) | 0;
        h = g; g = f; f = e; e = (d + t1) | 0; d = c; c = b; b = a; a = (t1 + t2) | 0;
      }
      h0 = (h0 + a) | 0; h1 = (h1 + b) | 0; h2 = (h2 + c) | 0; h3 = (h3 + d) | 0;
      h4 = (h4 + e) | 0; h5 = (h5 + f) | 0; h6 = (h6 + g) | 0; h7 = (h7 + h) | 0;
    }
    var out = new Uint8Array(32), hs = [h0, h1, h2, h3, h4, h5, h6, h7];
    for (i = 0; i < 8; i++) {
      out[i * 4] = (hs[i] >>> 24) & 0xff; out[i * 4 + 1] = (hs[i] >>> 16) & 0xff;
      out[i * 4 + 2] = (hs[i] >>> 8) & 0xff; out[i * 4 + 3] = hs[i] & 0xff;
    }
    return out;
  }

  function subtleCrypto() {
    var c = root.crypto;
    return c && c.subtle && typeof c.subtle.digest === 'function' ? c.subtle : null;
  }

  /**
   * Solves the challenge. Resolves to the nonce (a decimal string). `onProgress(tries)` is called between
   * batches; `shouldStop()` aborts (resolves null). WebCrypto digests run in batches of 256 in parallel
   * so the per-call overhead does not dominate; the page stays responsive between batches.
   */
  function solvePow(challenge, difficulty, onProgress, shouldStop) {
    var prefix = String(challenge) + POW_SEPARATOR;
    var bits = Math.max(0, Math.min(64, difficulty | 0));
    var subtle = subtleCrypto();
    var nonce = 0, BATCH = 256;
    return new Promise(function (resolve, reject) {
      function step() {
        if (shouldStop && shouldStop()) return resolve(null);
        if (!subtle) {
          var until = nonce + 4096;
          for (; nonce < until; nonce++) {
            if (leadingZeroBits(sha256(utf8(prefix + nonce))) >= bits) return resolve(String(nonce));
          }
          if (onProgress) onProgress(nonce);
          return setTimeout(step, 0);
        }
        var start = nonce, jobs = [];
        for (var i = 0; i < BATCH; i++) jobs.push(subtle.digest('SHA-256', utf8(prefix + (start + i))));
        nonce += BATCH;
        Promise.all(jobs).then(function (digests) {
          for (var i = 0; i < digests.length; i++) {
            if (leadingZeroBits(new Uint8Array(digests[i])) >= bits) return resolve(String(start + i));
          }
          if (onProgress) onProgress(nonce);
          setTimeout(step, 0);
        }, function () {
          subtle = null; // WebCrypto refused (odd browser): fall back to the JS hash.
          nonce = start;
          setTimeout(step, 0);
        }).catch(reject);
      }
      step();
    });
  }

  var api = {
    pickLanguage: pickLanguage, etaText: etaText, leadingZeroBits: leadingZeroBits, sha256: sha256,
    utf8: utf8, solvePow: solvePow, TEXT: TEXT, roomFromPath: roomFromPath, safeRedirect: safeRedirect,
    POW_SEPARATOR: POW_SEPARATOR
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
  var storage = (function () { try { return root.localStorage; } catch (e) { return null; } })();
  var session = (function () { try { return root.sessionStorage; } catch (e) { return null; } })();
  var lang = pickLanguage(storage && storage.getItem('wicket_lang'), navigator.languages || [navigator.language]);
  var last = null;           // last status JSON
  var finished = false;      // admitted / sold out / closed: stop talking to the server
  var source = null;         // EventSource
  var pollTimer = null;
  var failures = 0;
  var lastAnnounce = { at: 0, state: null };
  var checkRunning = false;

  function meta(name) {
    var el = document.querySelector('meta[name="' + name + '"]');
    return el ? (el.getAttribute('content') || '').trim() : '';
  }

  function t() { return TEXT[lang]; }

  function applyLanguage() {
    document.documentElement.lang = lang;
    var texts = t();
    var nodes = document.querySelectorAll('[data-i18n]');
    for (var i = 0; i < nodes.length; i++) {
      var v = texts[nodes[i].getAttribute('data-i18n')];
      if (typeof v === 'string') nodes[i].textContent = v;
    }
    var buttons = document.querySelectorAll('.lang button');
    for (i = 0; i < buttons.length; i++) {
      buttons[i].setAttribute('aria-pressed', buttons[i].getAttribute('data-lang') === lang ? 'true' : 'false');
    }
    if (last) render(last, true); else document.title = texts.doc_title;
  }

  function announce(text, urgent) {
    var el = $(urgent ? 'announce-now' : 'announce');
    el.textContent = '';
    // A fresh text node after a tick so screen readers notice a repeat.
    setTimeout(function () { el.textContent = text; }, 50);
  }

  function setHeadline(titleKey, detailKey) {
    var texts = t();
    $('headline').textContent = texts[titleKey];
    $('detail').textContent = texts[detailKey];
    document.title = texts[titleKey] + ' · ' + texts.doc_title;
  }

  function progressFraction(s) {
    if (typeof s.ahead !== 'number' || !session) return null;
    var key = 'wicket_first_ahead_' + room;
    var first = Number(session.getItem(key));
    if (!first || s.ahead > first) { first = Math.max(1, s.ahead); session.setItem(key, String(first)); }
    return Math.max(0, Math.min(1, 1 - s.ahead / first));
  }

  function render(s, quiet) {
    last = s;
    var texts = t();
    var state = s.state;
    // Sold out for now (unpaid holds may still return): the place is kept and polling goes on.
    var forNow = state === 'sold_out' && s.restock_possible === true;
    var show = state === 'waiting' || state === 'not_open' || state === 'paused' || forNow;
    $('queue').hidden = !show;
    if (state === 'waiting') setHeadline('title_waiting', 'detail_waiting');
    else if (state === 'not_open') setHeadline('title_not_open', 'detail_not_open');
    else if (state === 'paused') setHeadline('title_paused', 'detail_paused');
    else if (forNow) setHeadline('title_sold_out_for_now', 'detail_sold_out_for_now');
    else if (state === 'sold_out') setHeadline('title_sold_out', 'detail_sold_out');
    else if (state === 'closed') setHeadline('title_closed', 'detail_closed');
    else if (state === 'admitted') setHeadline('title_admitted', 'detail_admitted');

    if (show) {
      $('position').textContent = typeof s.position === 'number' ? fmt(s.position, lang) : '—';
      $('ahead').textContent = typeof s.ahead === 'number' ? texts.people(s.ahead) : '—';
      var eta = state === 'paused' || forNow ? '—' : etaText(texts, s.eta_seconds);
      $('eta').textContent = eta;
      var p = state === 'not_open' ? 0 : progressFraction(s);
      var pct = p === null ? 0 : Math.round(p * 100);
      $('fill').style.width = pct + '%';
      $('bar').setAttribute('aria-valuenow', String(pct));
      $('percent').textContent = pct + '%';
      $('rate').textContent = typeof s.release_per_second === 'number' && s.release_per_second > 0 && state === 'waiting'
        ? texts.rate(s.release_per_second) : '';
    }

    if (quiet) return;
    var now = Date.now();
    if (state !== lastAnnounce.state || forNow !== !!lastAnnounce.forNow) {
      var urgent = state === 'admitted';
      announce($('headline').textContent + (show && typeof s.ahead === 'number' && state === 'waiting'
        ? '. ' + texts.announce_position(s.ahead, etaText(texts, s.eta_seconds)) : ''), urgent);
      lastAnnounce = { at: now, state: state, forNow: forNow };
    } else if (state === 'waiting' && now - lastAnnounce.at > 60000 && typeof s.ahead === 'number') {
      // Position updates at most once a minute: a live region that talks every poll is unusable.
      announce(texts.announce_position(s.ahead, etaText(texts, s.eta_seconds)), false);
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
      $('detail').textContent = t().detail_admitted_link;
    }
  }

  function finish() {
    finished = true;
    if (source) { source.close(); source = null; }
    if (pollTimer) { clearTimeout(pollTimer); pollTimer = null; }
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
    $('conn').textContent = t().conn_sse;
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
    $('conn').textContent = t().conn_poll;
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

  function runCheck(kind, hints) {
    if (checkRunning || finished) return;
    checkRunning = true;
    if (source) { source.close(); source = null; }
    if (pollTimer) { clearTimeout(pollTimer); pollTimer = null; }
    $('check').hidden = false;
    if (kind === 'captcha') return runCaptcha(hints || {});
    return runPow(0);
  }

  function checkDone() {
    checkRunning = false;
    $('check').hidden = true;
  }

  function runPow(attempt) {
    var texts = t();
    $('check-text').textContent = attempt ? texts.pow_failed : texts.pow_running;
    getJSON(base + '/challenge').then(function (a) {
      var c = a.body;
      if (!c || typeof c.challenge !== 'string' || typeof c.difficulty !== 'number') throw new Error('bad challenge');
      return solvePow(c.challenge, c.difficulty, function (n) {
        $('check-text').textContent = t().pow_progress(n);
      }, function () { return finished; }).then(function (nonce) {
        if (nonce === null) return null;
        return postJSON(base + '/join', { pow: { challenge: c.challenge, nonce: nonce } });
      });
    }).then(function (a) {
      if (!a) return;
      if (a.body && typeof a.body.state === 'string') {
        checkDone();
        handleAnswer(a.status, a.body);
        if (!finished) startUpdates();
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
    var texts = t();
    var script = hints.captcha_script || meta('wicket-captcha-script');
    var sitekey = hints.captcha_sitekey || meta('wicket-captcha-sitekey');
    var cls = hints.captcha_class || meta('wicket-captcha-class') || 'cf-turnstile';
    var slot = $('captcha-slot');
    // Sites may render their own widget into #captcha-slot and call wicketCaptchaDone(token) themselves.
    root.wicketCaptchaDone = function (token) {
      if (typeof token !== 'string' || !token) return;
      postJSON(base + '/join', { captcha: token }).then(function (a) {
        if (a.body && typeof a.body.state === 'string') {
          checkDone();
          slot.textContent = '';
          handleAnswer(a.status, a.body);
          if (!finished) startUpdates();
        } else {
          $('check-text').textContent = texts.pow_failed;
          if (root.turnstile && root.turnstile.reset) try { root.turnstile.reset(); } catch (e) { /* widget gone */ }
          if (root.hcaptcha && root.hcaptcha.reset) try { root.hcaptcha.reset(); } catch (e) { /* widget gone */ }
          if (root.grecaptcha && root.grecaptcha.reset) try { root.grecaptcha.reset(); } catch (e) { /* widget gone */ }
        }
      }, function () {
        $('check-text').textContent = t().detail_error;
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
    widget.setAttribute('data-language', lang === 'zh-CN' ? 'zh-cn' : 'en');
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
    var buttons = document.querySelectorAll('.lang button');
    for (var i = 0; i < buttons.length; i++) {
      buttons[i].addEventListener('click', function (ev) {
        var l = ev.currentTarget.getAttribute('data-lang');
        if (LANGS.indexOf(l) < 0) return;
        lang = l;
        if (storage) try { storage.setItem('wicket_lang', l); } catch (e) { /* private mode */ }
        applyLanguage();
      });
    }
    applyLanguage();
    if (!room) { setHeadline('title_error', 'detail_error'); return; }
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
