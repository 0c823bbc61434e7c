// The live page of sluice serve. It polls the JSON API about once a second
// and turns cumulative counts into rates by differencing successive polls.
// Everything from the server is written with textContent, never as HTML:
// hot keys are client input.
"use strict";

(() => {
  const POLL_MS = 1000;
  const HISTORY = 60; // polls kept for a sparkline
  const TOKEN_KEY = "sluice.token";

  const $ = (id) => document.getElementById(id);
  const fmt = new Intl.NumberFormat(undefined, { maximumFractionDigits: 1 });
  const number = (v) => (Number.isFinite(v) ? fmt.format(v) : "—");

  let token = "";
  try { token = sessionStorage.getItem(TOKEN_KEY) || ""; } catch { /* storage off: keep it in memory */ }

  // prev is the last stats snapshot: the server's uptime and, by limiter,
  // cumulative decisions and rejections. history holds decisions/s.
  let prev = null;
  const history = new Map();
  let lastUpdate = null;
  let busy = false;
  let timer = 0;
  let panelCount = 0; // simulate panels made, for unique heading ids

  class HTTPError extends Error {
    constructor(status, message) {
      super(message);
      this.status = status;
    }
  }

  async function api(path, timeoutMs) {
    const headers = token ? { Authorization: "Bearer " + token } : {};
    const res = await fetch(path, { headers, cache: "no-store", signal: AbortSignal.timeout(timeoutMs) });
    if (!res.ok) throw new HTTPError(res.status, await reason(res));
    return res;
  }

  // reason is the most useful line of an error response: the message of
  // a JSON error if there is one, else the start of the body.
  async function reason(res) {
    const text = (await res.text().catch(() => "")).trim();
    try {
      const body = JSON.parse(text);
      const msg = body?.error?.message ?? body?.message ?? body?.error;
      if (typeof msg === "string" && msg) return `HTTP ${res.status}: ${msg}`;
    } catch { /* not JSON */ }
    return `HTTP ${res.status}` + (text ? `: ${text.slice(0, 200)}` : "");
  }

  function describe(err) {
    if (err instanceof HTTPError) return err.message;
    if (err?.name === "TimeoutError") return "the server did not answer in time";
    return "the server cannot be reached";
  }

  function schedule(ms) {
    clearTimeout(timer);
    timer = setTimeout(poll, ms);
  }

  // readiness is what /readyz answers: {ok: true}, or {ok: false,
  // reason} when it answers anything but 200 or cannot be asked. It
  // never throws: a page that cannot tell says so rather than "ready".
  async function readiness() {
    try {
      await api("readyz", 5000);
      return { ok: true };
    } catch (err) {
      return { ok: false, reason: describe(err) };
    }
  }

  async function poll() {
    busy = true;
    try {
      const [lim, stats, ready] = await Promise.all([
        api("api/v1/limiters", 5000).then((r) => r.json()),
        api("api/v1/stats", 5000).then((r) => r.json()),
        readiness(),
      ]);
      render(lim.limiters || [], stats, ready);
      $("auth").hidden = true;
      showBanner("");
    } catch (err) {
      if (!lastUpdate) {
        $("limiters").replaceChildren(emptyRow(10, "No data yet."));
        $("hot").replaceChildren(emptyRow(3, "No data yet."));
      }
      if (err instanceof HTTPError && err.status === 401) {
        askToken(token ? "The server refused this token. Enter another one." : "This server's API needs a bearer token.");
        showBanner("");
      } else {
        const since = lastUpdate ? ` The figures below are from ${lastUpdate.toLocaleTimeString()}.` : "";
        showBanner(`Cannot update: ${describe(err)}. Retrying every second.${since}`);
      }
    } finally {
      busy = false;
      schedule(POLL_MS);
    }
  }

  function showBanner(text) {
    const b = $("banner");
    b.textContent = text;
    b.hidden = !text;
  }

  function askToken(message) {
    $("auth-msg").textContent = message;
    $("auth").hidden = false;
  }

  $("auth-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    token = $("token").value.trim();
    try { sessionStorage.setItem(TOKEN_KEY, token); } catch { /* memory only */ }
    $("token").value = "";
    $("auth").hidden = true;
    if (!busy) schedule(0);
    for (const panel of $("sims").children) panel.run();
  });

  // rates differences stats against the previous poll. It returns, by
  // limiter, decisions and rejections per second over the server's own
  // clock, or nothing for a limiter whose counts went backwards (a restart
  // or a reload that reset them).
  function rates(stats) {
    const now = stats.uptime_seconds;
    const counts = new Map();
    for (const s of stats.limiters || []) {
      counts.set(s.name, { decisions: s.allowed + s.rejected, rejected: s.rejected });
    }
    const out = new Map();
    const dt = prev ? now - prev.uptime : 0;
    if (dt > 0) {
      for (const [name, c] of counts) {
        const p = prev.counts.get(name);
        if (p && c.decisions >= p.decisions && c.rejected >= p.rejected) {
          out.set(name, { dps: (c.decisions - p.decisions) / dt, rps: (c.rejected - p.rejected) / dt });
        }
      }
    }
    if (dt < 0) history.clear(); // the server restarted
    if (dt !== 0 || !prev) prev = { uptime: now, counts };
    return out;
  }

  function render(limiters, stats, ready) {
    const byName = new Map((stats.limiters || []).map((s) => [s.name, s]));
    const r = rates(stats);
    for (const name of history.keys()) {
      if (!limiters.some((l) => l.name === name)) history.delete(name);
    }
    for (const [name, v] of r) {
      const h = history.get(name) || [];
      h.push(v.dps);
      if (h.length > HISTORY) h.shift();
      history.set(name, h);
    }

    $("store").textContent = stats.store || "?";
    showReadiness(ready);
    $("uptime").textContent = duration(stats.uptime_seconds);
    lastUpdate = new Date();
    $("updated").textContent = lastUpdate.toLocaleTimeString();
    $("updated").dateTime = lastUpdate.toISOString();

    const rows = limiters.map((l) => limiterRow(l, byName.get(l.name), r.get(l.name), ready));
    $("limiters").replaceChildren(...(rows.length ? rows : [emptyRow(10, "No limiters configured.")]));
    totalsRow(limiters, byName, r);

    const hot = (stats.hot_keys || []).map((k) => row([
      cell("td", k.limiter),
      cell("td", k.key, "mono"),
      cell("td", number(k.count), "num"),
    ]));
    $("hot").replaceChildren(...(hot.length ? hot : [emptyRow(3, "No keys yet.")]));

    syncSims(limiters.map((l) => l.name));
  }

  function limiterRow(l, s, v, ready) {
    const name = cell("th", l.name);
    name.scope = "row";
    name.append(cell("span", l.policy, "policy mono"));
    const tr = row([
      name,
      cell("td", number(l.limit), "num"),
      cell("td", number(v?.dps), "num"),
      cell("td", number(v?.rps), "num"),
      cell("td", percent(v?.rps, v?.dps), "num"),
      cell("td", number(s?.allowed), "num"),
      cell("td", number(s?.rejected), "num"),
      cell("td", number(s?.errors), "num"),
      badge(s, ready),
      sparkCell(l.name),
    ]);
    tr.dataset.limiter = l.name;
    return tr;
  }

  // percent is part of whole in percent, or a dash without a whole.
  function percent(part, whole) {
    return whole > 0 ? number((100 * part) / whole) + "%" : "—";
  }

  // totalsRow sums the rates and totals over every limiter, in the
  // table's foot.
  function totalsRow(limiters, byName, r) {
    const foot = $("totals");
    if (limiters.length < 2) {
      foot.hidden = true;
      return;
    }
    const sum = (f) => limiters.reduce((acc, l) => acc + (f(l) ?? 0), 0);
    const dps = sum((l) => r.get(l.name)?.dps), rps = sum((l) => r.get(l.name)?.rps);
    const label = cell("th", "All limiters");
    label.scope = "row";
    const rated = limiters.some((l) => r.has(l.name));
    foot.replaceChildren(row([
      label,
      cell("td", ""),
      cell("td", rated ? number(dps) : "—", "num"),
      cell("td", rated ? number(rps) : "—", "num"),
      cell("td", rated ? percent(rps, dps) : "—", "num"),
      cell("td", number(sum((l) => byName.get(l.name)?.allowed)), "num"),
      cell("td", number(sum((l) => byName.get(l.name)?.rejected)), "num"),
      cell("td", number(sum((l) => byName.get(l.name)?.errors)), "num"),
      cell("td", ""),
      cell("td", ""),
    ]));
    foot.hidden = false;
  }

  // showReadiness writes /readyz's answer in the header and, when the
  // server is not ready, why, under it.
  function showReadiness(ready) {
    const span = cell("span", ready.ok ? "ready" : "not ready", ready.ok ? "badge ok" : "badge bad");
    $("ready").replaceChildren(span);
    const note = $("readiness");
    note.textContent = ready.ok ? "" : `The server is not ready (/readyz): ${ready.reason}. ` +
      "Decisions that need the store fail or follow server.store_failure until it answers.";
    note.hidden = ready.ok;
  }

  // badge is a limiter's health, the worst that holds: the server is not
  // ready (its store does not answer), the limiter's circuit breaker keeps
  // its calls from the store, a store failure decided some of its recent
  // decisions, it rejects more than the health threshold, or ok.
  function badge(s, ready) {
    const td = document.createElement("td");
    if (!s) {
      td.textContent = "—";
      return td;
    }
    const [text, title] =
      !ready.ok ? ["not ready", `The server is not ready: ${ready.reason}.`]
      : s.circuit_open ? ["circuit open", "Its circuit breaker keeps its calls from the store; server.store_failure decides."]
      : s.store_failing ? ["store failing", "A store failure decided some of its decisions in the health window."]
      : s.degraded ? ["degraded", "It rejected more than the health threshold of its decisions in the health window."]
      : ["ok", ""];
    const span = cell("span", text, text === "ok" ? "badge ok" : "badge bad");
    if (title) span.title = title;
    td.append(span);
    return td;
  }

  // sparkCell draws the last polls' decisions/s across the whole width,
  // oldest on the left, on a scale from zero to the highest value shown.
  function sparkCell(name) {
    const td = document.createElement("td");
    const h = history.get(name) || [];
    if (h.length < 2) {
      td.textContent = "…";
      return td;
    }
    const svg = $("spark-template").content.firstElementChild.cloneNode(true);
    const max = Math.max(...h, 1);
    const step = 120 / (h.length - 1);
    const points = h.map((v, i) => `${(i * step).toFixed(1)},${(22 - (v / max) * 20).toFixed(1)}`);
    svg.querySelector("polyline").setAttribute("points", points.join(" "));
    svg.setAttribute("aria-label", `Decisions per second over the last ${h.length} polls: ` +
      `lowest ${number(Math.min(...h))}, highest ${number(Math.max(...h))}, now ${number(h[h.length - 1])}`);
    td.append(svg);
    return td;
  }

  function row(cells) {
    const tr = document.createElement("tr");
    tr.append(...cells);
    return tr;
  }

  function cell(tag, text, className) {
    const c = document.createElement(tag);
    c.textContent = text ?? "";
    if (className) c.className = className;
    return c;
  }

  function emptyRow(span, text) {
    const td = cell("td", text, "empty");
    td.colSpan = span;
    return row([td]);
  }

  function duration(seconds) {
    const s = Math.floor(seconds || 0);
    const d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60);
    const pad = (n) => String(n).padStart(2, "0");
    if (d) return `${d}d ${h}h`;
    if (h) return `${h}h ${pad(m)}m`;
    if (m) return `${m}m ${pad(s % 60)}s`;
    return `${s}s`;
  }

  // syncSims keeps one simulate panel per configured limiter, in config
  // order, leaving the panels of limiters that stay as the user left them.
  function syncSims(names) {
    const box = $("sims");
    const have = new Map([...box.children].map((p) => [p.dataset.limiter, p]));
    const panels = names.map((name) => have.get(name) || simPanel(name));
    box.replaceChildren(...panels);
    for (const p of panels) if (!p.ran) p.run();
  }

  function simPanel(name) {
    const panel = $("sim-template").content.firstElementChild.cloneNode(true);
    const form = panel.querySelector("form");
    const img = panel.querySelector("img");
    const msg = panel.querySelector(".msg");
    const button = form.querySelector("button");
    const heading = panel.querySelector("h3");
    heading.textContent = name;
    heading.id = "sim-h-" + ++panelCount;
    panel.setAttribute("aria-labelledby", heading.id);
    panel.dataset.limiter = name;

    panel.run = async () => {
      panel.ran = true;
      const traffic = form.elements.traffic.value.trim();
      const dur = form.elements.duration.value.trim();
      const query = new URLSearchParams({ limiter: name, traffic, duration: dur });
      button.disabled = true;
      msg.className = "msg";
      msg.textContent = "Running…";
      try {
        // fetch rather than img.src: an image request cannot carry the
        // bearer token.
        const res = await api("api/v1/simulate?" + query, 15000);
        const blob = await res.blob();
        if (img.src) URL.revokeObjectURL(img.src);
        img.src = URL.createObjectURL(blob);
        img.alt = `Chart of ${name} under the traffic "${traffic}" for ${dur}: accepted and rejected requests over time.`;
        img.hidden = false;
        msg.textContent = "";
      } catch (err) {
        img.hidden = true;
        msg.className = "msg error";
        if (err instanceof HTTPError && err.status === 404) {
          msg.textContent = `Simulation is not available on this server (${err.message}).`;
        } else if (err instanceof HTTPError && err.status === 401) {
          msg.textContent = "Simulation needs the API token (see above).";
        } else {
          msg.textContent = `Simulation failed: ${describe(err)}.`;
        }
      } finally {
        button.disabled = false;
      }
    };
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      panel.run();
    });
    return panel;
  }

  poll();
})();
