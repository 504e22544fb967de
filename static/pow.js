// Wicket proof-of-work solver.
//
// The edge hands out {challenge, difficulty} at /wicket/challenge; the answer is the first decimal
// nonce such that sha256(challenge + nonce) starts with `difficulty` zero bits. POST it to
// /wicket/verify as {"pow": {"challenge", "nonce"}} to get a bot pass cookie.
//
// Use: <script src="/wicket/pow.js" data-auto="reload"></script> solves, verifies and reloads the
// page; or call `await WicketPow.pass()` yourself (returns the verify answer). In Node:
// `require('./pow.js').solve(challenge, difficulty)`.
(function (root) {
  "use strict";
  const K = new Uint32Array([
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
    0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
    0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
    0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
    0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
  ]);
  const W = new Uint32Array(64);

  // SHA-256 of an ASCII string (challenges and nonces are ASCII); returns 8 words.
  function sha256(str) {
    const n = str.length;
    const blocks = ((n + 9 + 63) >> 6);
    const buf = new Uint8Array(blocks * 64);
    for (let i = 0; i < n; i++) buf[i] = str.charCodeAt(i);
    buf[n] = 0x80;
    const bits = n * 8;
    buf[buf.length - 4] = (bits >>> 24) & 0xff;
    buf[buf.length - 3] = (bits >>> 16) & 0xff;
    buf[buf.length - 2] = (bits >>> 8) & 0xff;
    buf[buf.length - 1] = bits & 0xff;
    let h0 = 0x6a09e667, h1 = 0xbb67ae85, h2 = 0x3c6ef372, h3 = 0xa54ff53a;
    let h4 = 0x510e527f, h5 = 0x9b05688c, h6 = 0x1f83d9ab, h7 = 0x5be0cd19;
    for (let b = 0; b < blocks; b++) {
      const o = b * 64;
      for (let i = 0; i < 16; i++) {
        W[i] = (buf[o + 4 * i] << 24) | (buf[o + 4 * i + 1] << 16) | (buf[o + 4 * i + 2] << 8) | buf[o + 4 * i + 3];
      }
      for (let i = 16; i < 64; i++) {
        const x = W[i - 15], y = W[i - 2];
        const s0 = ((x >>> 7) | (x << 25)) ^ ((x >>> 18) | (x << 14)) ^ (x >>> 3);
        const s1 = ((y >>> 17) | (y << 15)) ^ ((y >>> 19) | (y << 13)) ^ (y >>> 10);
        W[i] = (W[i - 16] + s0 + W[i - 7] + s1) | 0;
      }
      let a = h0, c = h2, d = h3, e = h4, f = h5, g = h6, h = h7, bb = h1;
      for (let i = 0; i < 64; i++) {
        const S1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
        const ch = (e & f) ^ (~e & g);
        const t1 = (h + S1 + ch + K[i] + W[i]) | 0;
        const S0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
        const maj = (a & bb) ^ (a & c) ^ (bb & c);
        const t2 = (S0 + maj) | 0;
        h = g; g = f; f = e; e = (d + t1) | 0; d = c; c = bb; bb = a; a = (t1 + t2) | 0;
      }
      h0 = (h0 + a) | 0; h1 = (h1 + bb) | 0; h2 = (h2 + c) | 0; h3 = (h3 + d) | 0;
      h4 = (h4 + e) | 0; h5 = (h5 + f) | 0; h6 = (h6 + g) | 0; h7 = (h7 + h) | 0;
    }
    return [h0 >>> 0, h1 >>> 0, h2 >>> 0, h3 >>> 0, h4 >>> 0, h5 >>> 0, h6 >>> 0, h7 >>> 0];
  }

  function leadingZeroBits(words) {
    let n = 0;
    for (const w of words) {
      if (w === 0) { n += 32; continue; }
      return n + Math.clz32(w);
    }
    return n;
  }

  // The first nonce that solves the challenge (as a decimal string).
  function solve(challenge, difficulty) {
    for (let nonce = 0; ; nonce++) {
      const s = String(nonce);
      if (leadingZeroBits(sha256(challenge + s)) >= difficulty) return s;
    }
  }

  async function pass(base) {
    base = base || "";
    const c = await (await fetch(base + "/wicket/challenge", { headers: { accept: "application/json" } })).json();
    const nonce = solve(c.challenge, c.difficulty);
    const r = await fetch(base + "/wicket/verify", {
      method: "POST",
      headers: { "content-type": "application/json", accept: "application/json" },
      credentials: "same-origin",
      body: JSON.stringify({ pow: { challenge: c.challenge, nonce: nonce } }),
    });
    return r.json();
  }

  const api = { sha256: sha256, leadingZeroBits: leadingZeroBits, solve: solve, pass: pass };
  if (typeof module !== "undefined" && module.exports) module.exports = api;
  root.WicketPow = api;

  if (typeof document !== "undefined" && document.currentScript &&
      document.currentScript.dataset.auto === "reload") {
    pass().then(function (r) {
      if (r && r.ok) location.reload();
      else {
        const el = document.getElementById("pow-status");
        if (el) el.textContent = "Check failed: " + ((r && r.message) || "unknown error");
      }
    });
  }
})(typeof self !== "undefined" ? self : this);
