//! The console's scripts, each a few inline lines on one page, allowed by its hash in the
//! Content-Security-Policy ([`ALL`]). Reading needs none of them.

/// The task page (see `live`): follows the events and puts each update in place; closes
/// once the task is final (so the browser does not reconnect).
pub(crate) const SCRIPT: &str = r#"(function(){if(!window.EventSource)return;var es=new EventSource(location.pathname+"/events");function el(i){return document.getElementById(i);}es.onmessage=function(m){var d=JSON.parse(m.data);el("task-status").textContent=d.status;el("task-status-message").textContent=d.message||"";var i=el("task-inputs");if(i&&i.getAttribute("data-keys")!==d.keys){i.outerHTML=d.inputs;}var r=el("task-result");if(r&&d.result){r.outerHTML=d.result;}var a=el("task-attempt");if(a&&d.attempt)a.textContent=d.attempt;var t=el("task-timeline");if(t&&d.timeline)t.outerHTML=d.timeline;if(d.terminal){var c=el("task-cancel");if(c)c.remove();es.close();}};})();"#;

/// The tasks list (see `live_list`): puts each row's status, attempt and message in
/// place, and shows or hides the "new tasks" notice.
pub(crate) const LIST: &str = r#"(function(){var n=document.getElementById("new-tasks");if(!n||!window.EventSource)return;var es=new EventSource(n.getAttribute("data-events"));es.onmessage=function(m){var d=JSON.parse(m.data);(d.rows||[]).forEach(function(r){var t=document.querySelector('tr[data-task-id="'+r.id+'"]');if(!t)return;t.setAttribute("data-status",r.status);t.querySelector(".status").textContent=r.status;t.querySelector(".attempt").textContent=r.attempt;t.querySelector(".message").textContent=r.message||"";});if(d.notice!==undefined){n.querySelector(".count").textContent=d.notice;n.hidden=d.new===0;}};})();"#;

/// The inbox (see `live_inbox`): puts each new rendering of the list in place.
pub(crate) const INBOX: &str = r#"(function(){var b=document.getElementById("inbox-live");if(!b||!window.EventSource)return;var es=new EventSource(b.getAttribute("data-events"));es.onmessage=function(m){b.innerHTML=JSON.parse(m.data).html;};})();"#;

/// The health page (see `live_health`): puts each new rendering of its figures in place.
pub(crate) const HEALTH: &str = r#"(function(){var b=document.getElementById("health-live");if(!b||!window.EventSource)return;var es=new EventSource(b.getAttribute("data-events"));es.onmessage=function(m){b.innerHTML=JSON.parse(m.data).html;};})();"#;

/// Every script, for the Content-Security-Policy.
pub(crate) const ALL: [&str; 4] = [SCRIPT, LIST, INBOX, HEALTH];
