// The pages work without this script; it adds what only a browser can.

// How long before or after now `t` is, as the server says it (see `ago`
// in pages/filters.rs): "just now", "40 s ago", "3 min ago", "in 5 min", "2 h ago",
// "3 days ago".
function ago(t, now) {
  const secs = Math.trunc((now - t) / 1000);
  const n = Math.abs(secs);
  let span;
  if (n < 5) return "just now";
  else if (n < 60) span = `${n} s`;
  else if (n < 3600) span = `${Math.floor(n / 60)} min`;
  else if (n < 172800) span = `${Math.floor(n / 3600)} h`;
  else span = `${Math.floor(n / 86400)} days`;
  return secs < 0 ? `in ${span}` : `${span} ago`;
}

// Every <time datetime="..."> in the viewer's own time zone (the server
// writes UTC; the title keeps it), and the "ago" beside it kept current.
const times = [...document.querySelectorAll("time[datetime]")]
  .map((el) => ({ el, t: new Date(el.getAttribute("datetime")) }))
  .filter(({ t }) => !isNaN(t));
times.forEach(({ el, t }) => {
  el.title = el.getAttribute("datetime");
  el.textContent = el.hasAttribute("data-short")
    ? t.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit", timeZoneName: "short" })
    : t.toLocaleString(undefined, {
      year: "numeric", month: "short", day: "numeric",
      hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short",
    });
});
// Every 15 s: "ago" moves in seconds for the first minute, so it is never
// more than a step behind.
const AGO_REFRESH_MS = 15000;
function refreshAgo() {
  const now = Date.now();
  times.forEach(({ el, t }) => {
    const next = el.nextElementSibling;
    if (next && next.classList.contains("ago")) next.textContent = ago(t, now);
  });
}
refreshAgo();
setInterval(refreshAgo, AGO_REFRESH_MS);

// The checkboxes that belong to `form` (inside it, or naming it with
// form="...": a list's rows sit outside its bulk form).
function picks(form) {
  return [...document.querySelectorAll("input[type=checkbox][name=id]")].filter((box) => box.form === form);
}

// A form or button marked data-confirm (Purge, Pause, every bulk action)
// asks first; "{n}" says how many rows are ticked. Without script the form
// posts as it is.
document.addEventListener("submit", (event) => {
  const form = event.target;
  const button = event.submitter;
  const ask = (button && button.getAttribute("data-confirm")) || form.getAttribute("data-confirm");
  if (!ask) return;
  const n = picks(form).filter((box) => box.checked).length;
  if (!window.confirm(ask.replace("{n}", String(n)))) event.preventDefault();
});

// "Select every row": a box in a list's header ticks every row of its form.
document.querySelectorAll("input.pick-all[data-form]").forEach((all) => {
  const form = document.getElementById(all.getAttribute("data-form"));
  if (!form) return;
  all.hidden = false;
  all.addEventListener("change", () => picks(form).forEach((box) => { box.checked = all.checked; }));
});
