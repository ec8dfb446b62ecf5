// Live parts of the workspace list and workspace pages: poll the JSON API
// (the same one the CLI uses, with the session cookie) and follow build logs
// through its streaming logs endpoint. No framework; nothing leaves this origin.
"use strict";
(function () {
  const POLL_MS = 1500;
  // The colours of statuses come from the page (site.go, statusClassOf).
  const classes = JSON.parse(document.body.dataset.statusClasses || "{}");
  const cls = (s) => classes[s] || "busy";
  const setStatus = (el, s) => { if (el && el.textContent !== s) { el.textContent = s; el.className = "status " + cls(s); } };
  const el = (tag, text, attrs) => {
    const e = document.createElement(tag);
    if (text) e.textContent = text;
    for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
    return e;
  };
  async function api(path) {
    const res = await fetch(path, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (res.status === 401) { location.href = "/login?redirect=" + encodeURIComponent(location.pathname) + "&message=" + encodeURIComponent("Your session ended; sign in again."); throw new Error("signed out"); }
    if (!res.ok) { const b = await res.json().catch(() => ({})); throw new Error(b.message || res.statusText); }
    return res.json();
  }
  function loop(fn, first = POLL_MS) {
    // fn returns false to stop polling (a deleted workspace).
    const tick = async () => {
      let again = true;
      try { again = (await fn()) !== false; } catch (e) { /* the next poll retries */ }
      if (again) setTimeout(tick, POLL_MS);
    };
    setTimeout(tick, first);
  }

  const list = document.querySelector("[data-live=workspaces]");
  if (list) {
    loop(async () => {
      const res = await api("/api/v2/workspaces");
      for (const w of res.workspaces || []) {
        const row = list.querySelector(`tr[data-workspace-id="${w.id}"]`);
        if (row) setStatus(row.querySelector("[data-field=status]"), w.latest_build.status);
      }
    });
  }

  // followLog streams a job's log (the API's NDJSON …/logs?follow=true)
  // into pre, from the first line, until the job ends; after a network
  // error it goes on from the last line. keep() false stops it (the page
  // moved on to another build).
  async function followLog(path, pre, keep) {
    pre.textContent = "";
    let after = 0;
    for (;;) {
      try {
        const res = await fetch(`${path}?after=${after}&follow=true`, { credentials: "same-origin" });
        if (!res.ok || !res.body) return;
        const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
        let buf = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done) return;
          buf += value;
          let nl;
          while ((nl = buf.indexOf("\n")) >= 0) {
            const line = buf.slice(0, nl); buf = buf.slice(nl + 1);
            if (!line.trim()) continue;
            const l = JSON.parse(line);
            after = Math.max(after, l.id);
            if (!keep()) return;
            const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
            pre.append((l.stage ? "[" + l.stage + "] " : "") + l.output + "\n");
            if (atEnd) pre.scrollTop = pre.scrollHeight;
          }
        }
      } catch (e) {
        if (!keep()) return;
        await new Promise((r) => setTimeout(r, POLL_MS));
      }
    }
  }

  // A template version's import that is still running: follow its log,
  // then reload once it ended, to show the outcome.
  const importLog = document.querySelector("pre[data-follow]");
  if (importLog) {
    followLog(importLog.dataset.follow, importLog, () => true).then(() => location.reload());
  }

  const page = document.querySelector("[data-live=workspace]");
  if (!page) return;
  const base = page.dataset.base;
  // Apps open at their path, or a subdomain app at its own host (site/apps.go
  // does the same for the first render).
  const appBase = page.dataset.appBase || "";
  const appUnavailable = (x) => !x.subdomain || (x.subdomain_name && appBase) ? "" : appBase ? "a subdomain app whose names cannot make a host name (owner, workspace and agent names must not contain \"--\")" : page.dataset.noWildcard;
  // The region apps open through (the selector, regions.js): a workspace
  // proxy's access URL for path-based apps and ports, its wildcard for
  // subdomain apps (the primary's when it has none); "" is the primary.
  const regionSel = document.querySelector("[data-region-select]");
  const region = () => {
    const o = regionSel && regionSel.selectedOptions[0];
    return o && o.value !== "primary" ? o : null;
  };
  const pathBase = () => (region() ? region().dataset.pathAppUrl : "");
  const subdomainBase = () => (region() && region().dataset.appBase) || appBase;
  const appHref = (x) => x.subdomain && x.subdomain_name && appBase ? subdomainBase().replace("*", x.subdomain_name) + "/" : `${pathBase()}${base}/apps/${encodeURIComponent(x.slug)}/`;
  const logEl = document.getElementById("build-log");
  let following = null;
  function follow(buildID) {
    if (following === buildID) return;
    following = buildID;
    followLog(`/api/v2/workspacebuilds/${buildID}/logs`, logEl, () => following === buildID);
  }
  function renderAgents(w) {
    const box = page.querySelector("[data-field=agents]");
    const frag = document.createDocumentFragment();
    for (const r of w.latest_build.resources || []) {
      for (const a of r.agents || []) {
        const card = el("div", "", { class: "card agent" });
        card.append(el("h3", a.name));
        const p = el("p", "Status ");
        const st = el("span"); setStatus(st, a.status);
        const lc = el("span"); setStatus(lc, a.lifecycle_state);
        p.append(st, ", lifecycle ", lc);
        if (a.version) p.append(", version " + a.version);
        card.append(p);
        // links is a line of links, each with an optional status after it
        // (an app's health; "disabled" apps have none to show).
        const links = (label, items) => {
          if (!items.length) return;
          const q = el("p", label + ": ");
          for (const [text, href, status] of items) {
            q.append(href ? el("a", text, { href, target: "_blank", rel: "noopener" }) : el("span", text, { class: "app-unavailable", "data-app-unavailable": status.unavailable }));
            if (status && status.value && status.value !== "disabled") {
              const s = el("span", "", status.attrs); setStatus(s, status.value);
              q.append(" ", s);
            }
            q.append(" ");
          }
          card.append(q);
        };
        links("Apps", (a.apps || []).map((x) => appUnavailable(x)
          ? [`${x.display_name || x.slug} (unavailable: ${appUnavailable(x)})`, null, { unavailable: x.slug }]
          : [x.display_name || x.slug, appHref(x), { value: x.health, attrs: { "data-app-health": x.slug } }]));
        if ((a.metadata || []).length) card.append(facts(a.metadata.map((m) => {
          const dd = el("dd", m.result.error ? "" : m.result.value, { "data-metadata-key": m.description.key });
          if (m.result.error) dd.append(el("span", m.result.error, { class: "error-text" }));
          return [m.description.display_name || m.description.key, dd];
        }), "facts metadata"));
        links("Listening ports", (a.listening_ports || []).map((x) => [String(x.port), `${pathBase()}${base}/ports/${x.port}/`]));
        frag.append(card);
      }
    }
    if (!frag.childNodes.length) frag.append(el("p", "No agents (the workspace is not running)."));
    box.replaceChildren(frag);
  }
  // facts is a <dl> of [term, text or <dd>] pairs.
  function facts(pairs, cls) {
    const dl = el("dl", "", { class: cls || "facts" });
    for (const [k, v] of pairs) dl.append(el("dt", k), typeof v === "string" ? el("dd", v) : v);
    return dl;
  }
  function renderResources(w) {
    const frag = document.createDocumentFragment();
    for (const r of w.latest_build.resources || []) {
      if (r.hide) continue;
      const card = el("div", "", { class: "card resource" });
      card.append(el("h3", r.type + "." + r.name));
      if ((r.metadata || []).length) card.append(facts(r.metadata.map((m) => [m.key, m.sensitive ? "sensitive" : m.value])));
      frag.append(card);
    }
    if (!(w.latest_build.resources || []).length) frag.append(el("p", "No resources."));
    page.querySelector("[data-field=resources]").replaceChildren(frag);
  }
  // buttons enables the build buttons that fit the status: the rules of
  // actionsFor in pages.go.
  function buttons(w) {
    const s = w.latest_build.status;
    const busy = ["pending", "starting", "stopping", "deleting", "canceling"].includes(s);
    const set = (id, show, enable) => {
      const b = document.getElementById(id);
      b.closest("form").hidden = !show;
      b.disabled = !enable;
    };
    set("start", true, ["stopped", "failed", "canceled"].includes(s));
    set("stop", true, ["running", "failed", "canceled"].includes(s));
    set("cancel", busy, busy && s !== "canceling");
    set("update", w.outdated && s !== "deleted", !busy);
  }
  // Agent logs (startup script and coder_script output): polled per agent
  // from the line after the last one shown.
  const agentLogs = page.querySelector("[data-field=agent-logs]");
  const logAfter = {};
  async function pollAgentLogs(w) {
    const agents = (w.latest_build.resources || []).flatMap((r) => r.agents || []);
    const ids = agents.map((a) => a.id);
    for (const box of agentLogs.querySelectorAll("[data-agent-id]")) {
      if (!ids.includes(box.dataset.agentId)) box.remove(); // an earlier build's agent
    }
    for (const a of agents) {
      let pre = agentLogs.querySelector(`[data-agent-id="${a.id}"] pre`);
      if (!pre) {
        logAfter[a.id] = 0;
        pre = el("pre", "", { class: "log", tabindex: "0", "aria-label": "Logs of agent " + a.name });
        const box = el("div", "", { "data-agent-id": a.id });
        box.append(el("h3", a.name), pre);
        agentLogs.append(box);
      }
      const lines = await api(`/api/v2/workspaceagents/${a.id}/logs?after=${logAfter[a.id]}`);
      if (!lines.length) continue;
      const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.append(lines.map((l) => (l.source ? "[" + l.source + "] " : "") + l.output + "\n").join(""));
      logAfter[a.id] = lines[lines.length - 1].id;
      if (atEnd) pre.scrollTop = pre.scrollHeight;
    }
  }
  let last = null; // the workspace last rendered, again when the region changes
  if (regionSel) regionSel.addEventListener("change", () => { if (last) renderAgents(last); });
  async function refresh() {
    let w;
    try {
      w = await api(`/api/v2/workspaces/${page.dataset.workspaceId}`);
    } catch (e) {
      setStatus(page.querySelector("[data-field=status]"), "gone: " + e.message);
      return false;
    }
    last = w;
    setStatus(page.querySelector("[data-field=status]"), w.latest_build.status);
    buttons(w);
    renderAgents(w);
    renderResources(w);
    if (w.latest_build.status === "deleted") return false;
    page.querySelector("[data-field=build]").textContent = w.latest_build.build_number;
    if (w.latest_build.id !== following) follow(w.latest_build.id);
    await pollAgentLogs(w);
  }
  follow(page.dataset.buildId);
  loop(refresh, 0);
})();
