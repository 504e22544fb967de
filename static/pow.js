// Wicket proof-of-work solver: the one solver of both pages that ask for it (the queue page,
// static/queue.js, and the edge's "checking your browser" page for routes with a bot check).
//
// The edge hands out {challenge, difficulty} (at /wicket/challenge, or /queue/<room>/challenge);
// the answer is the first decimal nonce such that sha256(challenge + nonce) starts with
// `difficulty` zero bits (edge/src/bot.rs `ProofOfWork::verify`). POST it to /wicket/verify as
// {"pow": {"challenge", "nonce"}} for a bot pass cookie, or to /queue/<room>/join.
//
// Use: <script src="/wicket/pow.js" data-auto="reload" data-failed="Check failed: {why}"></script>
// solves, verifies and reloads the page; or call `await WicketPow.pass()` yourself (returns the
// verify answer), or `WicketPow.solveAsync(challenge, difficulty, onProgress, shouldStop)`. In Node:
// `require('./pow.js').solve(challenge, difficulty)`.
(function (root) {
  "use strict";

  // What goes between challenge and nonce in the hashed string: nothing, as the edge verifies it.
  var SEPARATOR = "";

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
    if (typeof TextEncoder !== "undefined") return new TextEncoder().encode(s);
    var out = [], e = unescape(encodeURIComponent(s));
    for (var i = 0; i < e.length; i++) out.push(e.charCodeAt(i));
    return new Uint8Array(out);
  }

  /** SHA-256 of bytes, pure JS (FIPS 180-4): for Node and for pages without WebCrypto (plain http). */
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

  function clampBits(difficulty) {
    return Math.max(0, Math.min(64, difficulty | 0));
  }

  /** The first nonce that solves the challenge (a decimal string), synchronously (Node, tests). */
  function solve(challenge, difficulty) {
    var prefix = String(challenge) + SEPARATOR, bits = clampBits(difficulty);
    for (var nonce = 0; ; nonce++) {
      if (leadingZeroBits(sha256(utf8(prefix + nonce))) >= bits) return String(nonce);
    }
  }

  function subtleCrypto() {
    var c = root.crypto;
    return c && c.subtle && typeof c.subtle.digest === "function" ? c.subtle : null;
  }

  /**
   * Solves the challenge without freezing the page; resolves to the same nonce as `solve`.
   * `onProgress(tries)` is called between batches; `shouldStop()` aborts (resolves null). WebCrypto
   * digests run in batches of 256 in parallel so the per-call overhead does not dominate.
   */
  function solveAsync(challenge, difficulty, onProgress, shouldStop) {
    var prefix = String(challenge) + SEPARATOR, bits = clampBits(difficulty);
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
        for (var i = 0; i < BATCH; i++) jobs.push(subtle.digest("SHA-256", utf8(prefix + (start + i))));
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

  /** Gets a challenge, solves it and asks /wicket/verify for a bot pass; the verify answer. */
  function pass(base) {
    base = base || "";
    return fetch(base + "/wicket/challenge", { headers: { accept: "application/json" } })
      .then(function (r) { return r.json(); })
      .then(function (c) {
        return solveAsync(c.challenge, c.difficulty).then(function (nonce) {
          return fetch(base + "/wicket/verify", {
            method: "POST",
            headers: { "content-type": "application/json", accept: "application/json" },
            credentials: "same-origin",
            body: JSON.stringify({ pow: { challenge: c.challenge, nonce: nonce } })
          });
        });
      })
      .then(function (r) { return r.json(); });
  }

  var api = {
    sha256: sha256, utf8: utf8, leadingZeroBits: leadingZeroBits, solve: solve, solveAsync: solveAsync, pass: pass,
    SEPARATOR: SEPARATOR
  };
  if (typeof module !== "undefined" && module.exports) module.exports = api;
  root.WicketPow = api;

  var script = typeof document !== "undefined" ? document.currentScript : null;
  if (script && script.dataset.auto === "reload") {
    var failed = function (why) {
      var el = document.getElementById("pow-status");
      var text = script.dataset.failed || "Check failed: {why}";
      if (el) el.textContent = text.replace("{why}", why || "?");
    };
    pass().then(function (r) {
      if (r && r.ok) location.reload();
      else failed(r && r.message);
    }, function (e) { failed(String(e)); });
  }
})(typeof self !== "undefined" ? self : this);
