//! `mcp-tasks dev`: migrate, one replica and one worker in one process, on a throwaway
//! PostgreSQL when no database is given.

use anyhow::Context;
use clap::Args;
use mcp_tasks_devdb::DevDatabase;
use tokio_util::sync::CancellationToken;

use super::args::{OptionalDatabase, Tools, connect};
use super::serve::{ServerArgs, serve};
use super::worker::{WorkerArgs, install_metrics};
use crate::App;

#[derive(Debug, Args)]
pub(super) struct DevCommand {
    #[command(flatten)]
    database: OptionalDatabase,
    #[command(flatten)]
    tools: Tools,
    #[command(flatten)]
    server: ServerArgs,
    #[command(flatten)]
    worker: WorkerArgs,
}

pub(super) async fn run(
    command: DevCommand,
    app: &App,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let DevCommand {
        database,
        tools,
        mut server,
        worker,
    } = command;
    // The console is on in dev unless turned off.
    server.console.by_default = true;
    server.ready.role = "dev";
    // Before a throwaway cluster is started for nothing.
    server.refuse_unsafe()?;
    let tools = tools.load(app).await?;
    let registry = tools.registry.clone();
    let throwaway;
    let url = match database.url {
        Some(url) => url.expose().to_owned(),
        None => {
            throwaway = tokio::task::spawn_blocking(DevDatabase::start).await??;
            tracing::info!(
                url = throwaway.url(),
                version = throwaway.version(),
                data = %throwaway.data_dir().display(),
                "DATABASE_URL is unset: started a throwaway PostgreSQL cluster; it is deleted on exit"
            );
            throwaway.url().to_owned()
        }
    };
    let store = connect(&url, &database.pool).await?;
    store.migrate().await.context("migrating")?;
    // One registry for the replica and the worker: the replica's `/metrics` (or the
    // metrics listener, when one is asked for) shows both.
    // The replica's and the worker's LISTEN, and the worker's duty connection.
    super::args::check_connection_budget(&store, 3).await;
    let metrics = install_metrics(&store)?;
    metrics.set_limits(super::worker::limits_source(
        tools.scheduling.clone(),
        registry.clone(),
    ));
    let worker_run = mcp_tasks_worker::run(
        store.worker(),
        registry.clone(),
        {
            let mut config = worker.config(&server.server_name);
            config.scheduling = tools.scheduling.clone();
            config
        },
        shutdown.clone(),
    );
    // Both in this task: when the replica is done, the worker drains too.
    let serving = async {
        let served = serve(
            store,
            registry,
            tools.scheduling.clone(),
            &server,
            Some(metrics),
            worker.metrics_listen,
            shutdown.clone(),
        )
        .await;
        shutdown.cancel();
        served
    };
    let (served, worked) = tokio::join!(serving, worker_run);
    worked?;
    served
}
