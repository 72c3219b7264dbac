// Shows every <time datetime="..."> in the viewer's own time zone (the
// server writes UTC); the title keeps the UTC value.
document.querySelectorAll("time[datetime]").forEach((el) => {
  const t = new Date(el.getAttribute("datetime"));
  if (isNaN(t)) return;
  el.title = el.getAttribute("datetime");
  el.textContent = el.hasAttribute("data-short")
    ? t.toLocaleTimeString(undefined, { hour: "2-digit", minute: "2-digit", timeZoneName: "short" })
    : t.toLocaleString(undefined, {
      year: "numeric", month: "short", day: "numeric",
      hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short",
    });
});

// A form marked data-confirm (Purge, Pause) asks first; without script the
// form posts as it is.
document.querySelectorAll("form[data-confirm]").forEach((form) => {
  form.addEventListener("submit", (event) => {
    if (!window.confirm(form.getAttribute("data-confirm"))) event.preventDefault();
  });
});
