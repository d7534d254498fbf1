//! `mcp-tasks bench create | get | lifecycle | pickup | scale | efficiency | console | fairness | pooler`: the service's
//! hot paths over HTTP, each beside the same statements issued raw in the same run, as
//! ratios (the machines these run on are shared, so only ratios compare across runs).

use std::io::Write;

pub use crate::env::Config;
use crate::env::Env;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    Create,
    Get,
    Lifecycle,
    Pickup,
    Scale,
    Efficiency,
    Console,
    Fairness,
    Pooler,
}

impl Scenario {
    pub const ALL: [Self; 9] = [
        Self::Create,
        Self::Get,
        Self::Lifecycle,
        Self::Pickup,
        Self::Scale,
        Self::Efficiency,
        Self::Console,
        Self::Fairness,
        Self::Pooler,
    ];
}

/// Runs one scenario in a world of its own (a scratch database and the service on it).
pub async fn run(scenario: Scenario, config: &Config, out: &mut dyn Write) -> anyhow::Result<()> {
    let env = Env::start(config).await?;
    let result = match scenario {
        Scenario::Create => crate::create_get::create(&env, out).await,
        Scenario::Get => crate::create_get::get(&env, out).await,
        Scenario::Lifecycle => crate::lifecycle::lifecycle(&env, out).await.map(|_| ()),
        Scenario::Pickup => crate::lifecycle::pickup(&env, out).await,
        Scenario::Scale => crate::scale::scale(&env, out).await,
        Scenario::Efficiency => crate::lifecycle::efficiency(&env, out).await,
        Scenario::Console => crate::console::console(&env, out).await,
        Scenario::Fairness => crate::fairness::fairness(&env, out).await,
        Scenario::Pooler => crate::pooler::pooler(&env, out).await,
    };
    let stopped = env.stop().await;
    result.and(stopped)
}

/// Every scenario, one after the other.
pub async fn run_all(config: &Config, out: &mut dyn Write) -> anyhow::Result<()> {
    for scenario in Scenario::ALL {
        if matches!(
            scenario,
            Scenario::Scale | Scenario::Console | Scenario::Fairness
        ) && config.url.is_some()
        {
            writeln!(
                out,
                "{scenario:?}: skipped (it bulk-loads the database; not with --url)"
            )?;
            continue;
        }
        run(scenario, config, out).await?;
    }
    Ok(())
}
