//! The console's one script: the task page's live part (see `live`), allowed by its hash
//! in the Content-Security-Policy.

/// Follows the events and puts each update in place; closes once the task is final (so
/// the browser does not reconnect). Reading needs none of it.
pub(crate) const SCRIPT: &str = r#"(function(){if(!window.EventSource)return;var es=new EventSource(location.pathname+"/events");function el(i){return document.getElementById(i);}es.onmessage=function(m){var d=JSON.parse(m.data);el("task-status").textContent=d.status;el("task-status-message").textContent=d.message||"";var i=el("task-inputs");if(i&&i.getAttribute("data-keys")!==d.keys){i.outerHTML=d.inputs;}var r=el("task-result");if(r&&d.result){r.outerHTML=d.result;}if(d.terminal){var c=el("task-cancel");if(c)c.remove();es.close();}};})();"#;
