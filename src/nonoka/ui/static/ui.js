// nonoka ui: the page script. Everything it inserts is HTML the server rendered (and
// escaped); it never builds markup from session data itself.
//
// The access token travels in an Authorization header, never in a cookie (browsers send
// cookies to every port of a host). It is kept in localStorage, which only pages of this
// origin (scheme, host and port) can read. A page loaded without the token is the small
// page the server answers a navigation with; this script fetches the real one with the
// header and shows it in its place.
"use strict";

(function () {
  const $ = (sel, root) => (root || document).querySelector(sel);
  const $$ = (sel, root) => Array.from((root || document).querySelectorAll(sel));
  const KEY = "nonoka-ui-token";
  const booting = document.documentElement.hasAttribute("data-boot");

  function remember(value) {
    try { localStorage.setItem(KEY, value); } catch (error) { /* storage off: this page only */ }
  }
  function remembered() {
    try { return localStorage.getItem(KEY) || ""; } catch (error) { return ""; }
  }
  function forget() {
    try { localStorage.removeItem(KEY); } catch (error) { /* nothing kept */ }
  }

  // The token arrives in the printed address (on a page the server accepted it for) or
  // handed over for a one-time code; either way it leaves the address bar at once.
  const address = new URL(location.href);
  const handed = $("meta[name=nonoka-token]");
  let token = booting ? (handed ? handed.content : "") : (address.searchParams.get("token") || "");
  if (address.searchParams.has("token") || address.searchParams.has("code")) {
    address.searchParams.delete("token");
    address.searchParams.delete("code");
    history.replaceState(history.state, "", address.href);
  }
  if (token) remember(token);
  else token = remembered();
  const auth = { Authorization: "Bearer " + token };

  if (booting) {
    boot();
    return;
  }

  async function boot() {
    const message = $("#boot-message");
    const refused = message.textContent;
    if (!token) return;
    message.textContent = "Opening…";
    try {
      // The origin spelled out: a path such as //other.host/ must not name another host.
      const response = await fetch(address.origin + address.pathname + address.search, {
        headers: Object.assign({ Accept: "text/html" }, auth), cache: "no-store", credentials: "omit" });
      if (response.status === 403) {  // a token from an earlier run of nonoka ui
        forget();
        message.textContent = refused;
        return;
      }
      const type = response.headers.get("content-type") || "";
      const body = await response.text();
      if (!type.startsWith("text/html")) {  // an error in words: shown as text, never as markup
        message.textContent = body;
        return;
      }
      if (response.redirected) history.replaceState(history.state, "", response.url + location.hash);
      document.open();
      document.write(body);
      document.close();
    } catch (error) {
      message.textContent = "nonoka: the ui server did not answer (" + error.message +
        "); is `nonoka ui` still running?";
    }
  }

  // A page shown by the script above scrolls to its #anchor as a loaded one would.
  try {
    const anchor = location.hash.length > 1 && document.getElementById(decodeURIComponent(location.hash.slice(1)));
    if (anchor) anchor.scrollIntoView();
  } catch (error) { /* a malformed #anchor: stay at the top */ }

  function toast(message, isError) {
    const box = $("#toast");
    if (!box) return;
    box.textContent = message;
    box.className = "toast" + (isError ? " error" : "");
    box.hidden = false;
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => { box.hidden = true; }, 5000);
  }

  async function getJSON(url) {
    const response = await fetch(url, { headers: auth, credentials: "omit", cache: "no-store" });
    if (!response.ok) throw new Error(response.status + " " + response.statusText);
    return response.json();
  }

  // Images are fetched with the header too (an <img src> could not carry it) and shown
  // from a blob: address that only this page can read.
  async function showImages(scope) {
    for (const img of $$("img[data-media]", scope)) {
      const path = img.dataset.media;
      img.removeAttribute("data-media");
      if (!path.startsWith("/media/")) continue;
      try {
        const response = await fetch(path, { headers: auth, credentials: "omit" });
        if (!response.ok) continue;
        const url = URL.createObjectURL(await response.blob());
        img.removeAttribute("width");
        img.removeAttribute("height");
        img.src = url;
        const link = img.closest("a[data-media]");
        if (link) { link.href = url; link.target = "_blank"; link.rel = "noopener"; }
      } catch (error) { /* the caption still names the file */ }
    }
  }

  // -- the sessions page ---------------------------------------------------------------
  const filters = $("#filters");
  if (filters) {
    $$("[data-autosubmit]", filters).forEach((el) => el.addEventListener("change", () => filters.submit()));
    document.addEventListener("keydown", (event) => {
      const search = $("#q");
      if (event.key === "/" && search && document.activeElement !== search) {
        event.preventDefault();
        search.focus();
        search.select();
      }
    });
  }

  // -- the session page ----------------------------------------------------------------
  const root = $("#session");
  if (!root) return;
  const sid = root.dataset.session;
  const base = "/s/" + encodeURIComponent(sid);

  function showTab(name) {
    const tabs = $$("[data-tab]");
    if (!tabs.some((t) => t.dataset.tab === name)) name = "conversation";
    tabs.forEach((t) => {
      t.classList.toggle("active", t.dataset.tab === name);
      t.setAttribute("aria-selected", t.dataset.tab === name ? "true" : "false");
    });
    $$("[data-panel]").forEach((p) => { p.hidden = p.dataset.panel !== name; });
    root.dataset.tab = name;
  }
  function bindTabs() {
    $$("[data-tab]").forEach((t) => t.addEventListener("click", () => {
      history.replaceState(null, "", "#" + t.dataset.tab);
      showTab(t.dataset.tab);
    }));
  }
  bindTabs();
  showTab((location.hash || "#conversation").slice(1).split("-")[0] === "step" ? "plan" : (location.hash || "#conversation").slice(1));
  window.addEventListener("hashchange", () => {
    const name = location.hash.slice(1);
    if (name.startsWith("step-")) showTab("plan");
    else if (["conversation", "timeline", "plan", "usage"].includes(name)) showTab(name);
  });

  const conversation = $("#conversation");
  showImages(conversation);
  const earlier = $("#load-earlier");
  if (earlier) {
    earlier.addEventListener("click", async () => {
      earlier.disabled = true;
      try {
        const chunk = await getJSON(base + "/entries?before=" + root.dataset.first);
        const anchor = conversation.firstElementChild;
        const top = anchor ? anchor.getBoundingClientRect().top : 0;
        conversation.insertAdjacentHTML("afterbegin", chunk.html);
        showImages(conversation);
        if (anchor) window.scrollBy(0, anchor.getBoundingClientRect().top - top);
        root.dataset.first = String(chunk.first);
        if (chunk.first <= 0) earlier.parentElement.remove();
        else earlier.querySelector(".muted").textContent = "(" + chunk.first.toLocaleString() + " more)";
      } catch (error) {
        toast("could not load earlier entries: " + error.message, true);
      } finally {
        earlier.disabled = false;
      }
    });
  }

  // Live: poll the revision; when it moves, fetch the new entries and fresh sections.
  const live = $("#live");
  const liveText = $("#live-text");
  const interval = Number(root.dataset.interval) || 1000;
  let busy = false;
  let failures = 0;

  async function refresh() {
    const nearBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
    for (;;) {  // new entries, in pages, until the stored conversation is all shown
      const chunk = await getJSON(base + "/entries?after=" + root.dataset.last);
      if (chunk.total - 1 < Number(root.dataset.last)) {  // compacted: rewritten, not appended
        location.reload();
        return;
      }
      if (!chunk.html) break;
      const holder = document.createElement("div");
      holder.innerHTML = chunk.html;
      Array.from(holder.children).forEach((el) => {
        el.classList.add("new");
        conversation.appendChild(el);
      });
      root.dataset.last = String(chunk.last);
      showImages(conversation);
      if (chunk.last >= chunk.total - 1) break;
    }
    const empty = $("#panel-conversation .empty-panel");
    if (empty && conversation.children.length) empty.remove();
    if (nearBottom && root.dataset.tab === "conversation") window.scrollTo(0, document.body.scrollHeight);
    const parts = await getJSON(base + "/parts");
    const map = { header: "#part-header", summary: "#part-summary", timeline_panel: "#part-timeline",
      plan_panel: "#part-plan", usage_panel: "#part-usage", sidebar: "#part-sidebar", tab_counts: "#part-tabs",
      cut_short: "#part-cut-short" };
    Object.keys(map).forEach((key) => { const el = $(map[key]); if (el && key in parts) el.innerHTML = parts[key]; });
    bindTabs();
    showTab(root.dataset.tab || "conversation");
  }

  async function poll() {
    if (busy || document.hidden) return;
    busy = true;
    try {
      const { revision } = await getJSON(base + "/revision");
      if (revision !== root.dataset.revision) {
        live.classList.add("flash");
        await refresh();
        // The revision read before the fetches, not the newer one the sections were
        // rendered at: a turn's answer stored between the entries and the sections then
        // moves the revision again, and the next poll fetches it.
        root.dataset.revision = revision;
        root.dataset.updates = String(Number(root.dataset.updates || 0) + 1);
        setTimeout(() => live.classList.remove("flash"), 600);
      }
      failures = 0;
      live.classList.add("on");
      live.classList.remove("off");
      liveText.textContent = "live";
    } catch (error) {
      failures += 1;
      if (failures > 2) {
        live.classList.add("off");
        live.classList.remove("on");
        liveText.textContent = "offline";
      }
    } finally {
      busy = false;
    }
  }
  setInterval(poll, interval);
  poll();

  // Actions (only rendered with --allow-actions): sent with a header no other site can set.
  async function act(action, fields) {
    const response = await fetch(base + "/" + action, {
      method: "POST", credentials: "omit", body: JSON.stringify(fields),
      headers: Object.assign({ "X-Nonoka-Action": "1", "Accept": "application/json", "Content-Type": "application/json" }, auth),
    });
    const type = response.headers.get("content-type") || "";
    if (type.includes("application/json")) {
      const answer = await response.json();
      if (answer.location) { location.href = answer.location; return; }
      toast(answer.message, !answer.ok);
      if (answer.ok) poll();
      return;
    }
    const blob = await response.blob();
    const link = document.createElement("a");
    link.href = URL.createObjectURL(blob);
    link.download = sid + ".jsonl";
    link.click();
  }
  document.addEventListener("click", (event) => {
    const button = event.target.closest("[data-action]");
    if (!button) return;
    if (button.dataset.confirm && !window.confirm(button.dataset.confirm)) return;
    const fields = button.dataset.entry ? { entry: Number(button.dataset.entry) } : {};
    act(button.dataset.action, fields).catch((error) => toast(error.message, true));
  });
})();
