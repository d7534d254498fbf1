//! `GET /console/health`: the claimable queue (depth, oldest), pickup delay and run
//! duration percentiles per tool over the last hour as server-drawn SVG plots (with the
//! figures in a table beside them), lapsed leases and crash recoveries, and the workers
//! (from the `workers` table: live ones idle or busy, and those gone lately) with what
//! they run. An admin sees its tenant's figures; anyone else those of its own tasks.
//! Workers are shared by every tenant: everyone sees their names (which its tasks'
//! timelines show anyway), tools and liveness; only an admin their host and pid; and the
//! running tasks under them are only those of the viewer's scope. The figures update
//! live (`live_health`); without JavaScript the page is complete as served.

use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use axum::routing::get;
use maud::{Markup, PreEscaped, html};
use mcp_tasks_store::{Health, HeldBack, PercentileBucket, StoreError, WorkerLoad, WorkerPresence};

use super::list::{count_text, scope};
use super::session::Viewer;
use super::{layout, script, timeline};
use mcp_tasks_server::AppState;

use crate::Console;

const WINDOW: Duration = Duration::from_secs(3600);
const BUCKETS: u32 = 12;
/// How long a worker that stopped refreshing its row is still listed, as gone.
const GONE_SHOWN: Duration = Duration::from_secs(600);
/// Running tasks listed per worker.
const RUNNING_SHOWN: usize = 20;
/// Queued tasks of the scope (oldest first) read for what the limits hold back.
const HELD_BACK_ROWS: i64 = 10_000;

pub(super) fn routes() -> Router<Console> {
    Router::new().route("/console/health", get(page))
}

async fn page(State(state): State<AppState>, viewer: Viewer) -> Response {
    let content = match content(&state, &viewer).await {
        Ok(content) => content,
        Err(e) => return layout::store_error(e),
    };
    let body = html! {
        h1 { "Health" }
        div #health-live data-events="/console/health/events" { (content) }
        script { (PreEscaped(script::HEALTH)) }
    };
    layout::respond(StatusCode::OK, layout::page(&viewer, "Health", body))
}

/// Everything the page shows below its title, as read now for this viewer: what the
/// live stream renders again.
pub(super) async fn content(state: &AppState, viewer: &Viewer) -> Result<Markup, StoreError> {
    let scope = scope(viewer, "");
    let limits = mcp_tasks_tools::claim_limits(&state.config().scheduling, &state.registry());
    let (health, seen, held) = tokio::try_join!(
        state
            .console_reads()
            .console_health(&scope, WINDOW, BUCKETS),
        state.console_reads().workers_seen(GONE_SHOWN),
        state
            .console_reads()
            .console_held_back(&scope, &limits, HELD_BACK_ROWS),
    )?;
    let whose = if viewer.is_admin {
        "tenant"
    } else {
        "own tasks"
    };
    Ok(html! {
        p { "Figures for your " (whose) ", over the last hour." }
        (figures(&health))
        h2 { "Held back by limits" }
        (held_back(&held, limits.is_empty()))
        h2 { "Pickup delay" }
        p { "From claimable to claimed, of the tasks created in each five minutes that have finished; p50, p90 and p99 per tool." }
        (plot("plot-pickup", &health, |b| b.pickup_ms))
        h2 { "Run duration" }
        p { "From the claim to the finish." }
        (plot("plot-duration", &health, |b| b.run_ms))
        (percentile_table(&health))
        h2 { "Workers" }
        (workers(&health, &seen, viewer.is_admin))
    })
}

fn ms_text(ms: f64) -> String {
    if ms >= 10_000.0 {
        format!("{:.1} s", ms / 1000.0)
    } else {
        format!("{ms:.0} ms")
    }
}

fn figures(h: &Health) -> Markup {
    html! {
        table #health-figures {
            tr { th { "Queue depth" } td #queue-depth { (count_text(h.queue_depth, h.queue_depth_at_least)) } }
            tr { th { "Oldest claimable" } td #oldest-claimable {
                @match h.oldest_claimable {
                    Some(age) => (ms_text(age.as_secs_f64() * 1000.0)),
                    None => "none waiting",
                }
            } }
            tr { th { "Lease lapses" } td #lease-lapses { (h.lapses.total()) } }
            tr { th { "Crash recoveries" } td #crash-recoveries {
                (h.lapses.reclaimed) " re-run, " (h.lapses.failed) " failed after their last attempt, "
                (h.lapses.cancelled) " cancelled"
            } }
        }
    }
}

/// The scope's queued tasks that a reached limit holds back (they start as soon as it
/// has room), by limit.
fn held_back(held: &[HeldBack], no_limits: bool) -> Markup {
    let what = |limit: &str| match limit {
        "tool" => "running at once of tool",
        "upstream" => "running at once of upstream",
        "tenant" => "running at once of tenant",
        "principal" => "running at once of one principal",
        "tool_rate" => "starts per second of tool",
        "upstream_rate" => "starts per second of upstream",
        _ => "limit",
    };
    html! {
        @if no_limits {
            p #held-back { "No limits are configured: nothing is held back." }
        } @else if held.is_empty() {
            p #held-back { "No limit holds back any of these queued tasks now." }
        } @else {
            table #held-back {
                tr { th { "Limit reached" } th { "Name" } th { "Queued tasks held back" } }
                @for h in held {
                    tr data-limit=(h.limit) data-name=(h.name) {
                        td { (what(&h.limit)) }
                        td { (h.name) }
                        td .held-tasks { (h.tasks) }
                    }
                }
            }
        }
    }
}

const COLORS: [&str; 6] = [
    "#0969da", "#bf3989", "#1a7f37", "#9a6700", "#8250df", "#cf222e",
];
const W: f64 = 640.0;
const H: f64 = 200.0;
const PAD: f64 = 40.0;
/// The percentiles each plot draws, in the order of `dashes`.
const PERCENTILES: [&str; 3] = ["p50", "p90", "p99"];
/// Room right of the plot for the legend (tool names, and which line is which percentile).
const LEGEND: f64 = 180.0;
/// Longest tool name the legend shows whole.
const LEGEND_CHARS: usize = 26;

/// One plot: a line per tool and percentile (p50 solid, p90 dashed, p99 dotted) over
/// the window's buckets, with a mark at each bucket (one bucket alone is a line of no
/// length); y from 0 to the largest figure.
fn plot(id: &str, h: &Health, value: impl Fn(&PercentileBucket) -> [f64; 3]) -> Markup {
    let mut tools: Vec<&str> = h.percentiles.iter().map(|b| b.tool.as_str()).collect();
    tools.sort_unstable();
    tools.dedup();
    let max = h
        .percentiles
        .iter()
        .flat_map(&value)
        .fold(0.0_f64, f64::max)
        .max(1.0);
    let start = time::OffsetDateTime::now_utc() - WINDOW;
    let bucket_s = h.bucket.as_secs_f64().max(1.0);
    let x = |b: &PercentileBucket| {
        let i = ((b.start - start).as_seconds_f64() / bucket_s)
            .round()
            .clamp(0.0, f64::from(BUCKETS - 1));
        PAD + i * (W - 2.0 * PAD) / f64::from((BUCKETS - 1).max(1))
    };
    let y = |v: f64| H - PAD / 2.0 - v / max * (H - PAD);
    let dashes = ["", "6 3", "2 3"];
    html! {
        svg class="plot" id=(id) viewBox={ "0 0 " (W + LEGEND) " " (H) } width=(W + LEGEND) height=(H) role="img" {
            title { (id) }
            line x1=(PAD) y1=(y(0.0)) x2=(W - PAD) y2=(y(0.0)) stroke="#888" {}
            line x1=(PAD) y1=(y(0.0)) x2=(PAD) y2=(y(max)) stroke="#888" {}
            text x="2" y=(y(max) + 4.0) font-size="10" { (ms_text(max)) }
            text x="2" y=(y(0.0)) font-size="10" { "0" }
            text x=(PAD) y=(H - 2.0) font-size="10" { "-60 min" }
            text x=(W - PAD - 20.0) y=(H - 2.0) font-size="10" { "now" }
            @if tools.is_empty() {
                text x=(W / 2.0 - 60.0) y=(H / 2.0) font-size="12" { "no finished tasks" }
            }
            @for (t, tool) in tools.iter().enumerate() {
                @let color = COLORS[t % COLORS.len()];
                @let points: Vec<&PercentileBucket> = h.percentiles.iter().filter(|b| b.tool == *tool).collect();
                @for (p, dash) in dashes.iter().enumerate() {
                    polyline fill="none" stroke=(color) stroke-dasharray=(dash) data-tool=(tool)
                        points=(points.iter().map(|b| format!("{:.1},{:.1}", x(b), y(value(b)[p]))).collect::<Vec<_>>().join(" ")) {}
                    @for b in &points {
                        circle cx=(format!("{:.1}", x(b))) cy=(format!("{:.1}", y(value(b)[p]))) r="2.5" fill=(color) {
                            title { (tool) " " (PERCENTILES[p]) " " (ms_text(value(b)[p])) }
                        }
                    }
                }
                text x=(W - PAD + 12.0) y=(14.0 + 12.0 * t as f64) font-size="10" fill=(color) {
                    title { (tool) }
                    (legend_name(tool))
                }
            }
            @if !tools.is_empty() {
                @for (p, dash) in dashes.iter().enumerate() {
                    @let at = H - PAD / 2.0 - 12.0 * (2 - p) as f64;
                    line x1=(W - PAD + 12.0) y1=(at - 3.0) x2=(W - PAD + 36.0) y2=(at - 3.0) stroke="#555" stroke-dasharray=(dash) {}
                    text x=(W - PAD + 40.0) y=(at) font-size="10" { (PERCENTILES[p]) }
                }
            }
        }
    }
}

/// A tool's name as the legend shows it: whole, or cut with an ellipsis (the full name
/// is the entry's tooltip).
fn legend_name(tool: &str) -> String {
    if tool.chars().count() <= LEGEND_CHARS {
        tool.to_owned()
    } else {
        let cut: String = tool.chars().take(LEGEND_CHARS - 1).collect();
        format!("{cut}…")
    }
}

fn percentile_table(h: &Health) -> Markup {
    html! {
        table #percentiles {
            thead { tr {
                th { "From" } th { "Tool" } th { "Tasks" }
                th { "Pickup p50 / p90 / p99" } th { "Run p50 / p90 / p99" }
            } }
            tbody {
                @for b in &h.percentiles {
                    tr data-tool=(b.tool) {
                        td { (timeline::when(b.start)) }
                        td { (b.tool) }
                        td { (b.samples) }
                        td { (b.pickup_ms.map(ms_text).join(" / ")) }
                        td { (b.run_ms.map(ms_text).join(" / ")) }
                    }
                }
            }
        }
    }
}

/// The registered workers seen lately, then any worker holding a lease without a row
/// (registration failed, or one of an older version); each with the viewer's tasks it runs.
fn workers(h: &Health, seen: &[WorkerPresence], admin: bool) -> Markup {
    let running = |id: &str| h.workers.iter().find(|w| w.worker == id);
    let unregistered: Vec<&WorkerLoad> = h
        .workers
        .iter()
        .filter(|w| !seen.iter().any(|s| s.id == w.worker))
        .collect();
    html! {
        p { "Worker processes: live ones idle or busy, and those gone in the last "
            (GONE_SHOWN.as_secs() / 60) " minutes; under each, the running tasks of your "
            (if admin { "tenant" } else { "own" }) "." }
        ul #workers {
            @if seen.is_empty() && unregistered.is_empty() {
                li .none { "No worker has been seen lately." }
            }
            @for w in seen {
                @let load = running(&w.id);
                @let state = if w.live { "live" } else { "gone" };
                li data-worker=(w.id) data-state=(state) {
                    strong { (w.id) } " "
                    span .worker-state { (state) }
                    @if w.live {
                        ": " (load.map_or(0, |l| l.running.len())) " running"
                    }
                    ", tools "
                    @if w.tools.is_empty() { "(any)" } @else { (w.tools.join(", ")) }
                    ", up since " (timeline::when(w.started_at))
                    ", last seen " (timeline::when(w.last_seen_at))
                    @if admin {
                        ", host " (w.host.as_deref().unwrap_or("?"))
                        ", pid " (w.pid.map(|p| p.to_string()).unwrap_or_else(|| "?".into()))
                        ", " (w.concurrency) " slots"
                    }
                    @if let Some(load) = load { (running_list(load)) }
                }
            }
            @for w in unregistered {
                li data-worker=(w.worker) data-state="live" {
                    strong { (w.worker) } " "
                    span .worker-state { "live" } ": " (w.running.len()) " running (not registered)"
                    (running_list(w))
                }
            }
        }
    }
}

fn running_list(w: &WorkerLoad) -> Markup {
    html! {
        ul {
            @for r in w.running.iter().take(RUNNING_SHOWN) {
                li data-task-id=(r.id) {
                    a href={ "/console/tasks/" (r.id) } { code { (r.id) } }
                    " " (r.tool) " (attempt " (r.attempt) ", lease until "
                    (timeline::when(r.lease_expires_at)) ")"
                }
            }
            @if w.running.len() > RUNNING_SHOWN {
                li { "and " (w.running.len() - RUNNING_SHOWN) " more" }
            }
        }
    }
}
