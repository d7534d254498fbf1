//! A build without the `harness` feature, as the serving binary is built (`cargo build -p
//! mcp-tasks`: the image, `cargo install`): `bench` and `chaos` are not in `--help`, and
//! running one says how to get a build that has them. (`cargo test -p mcp-tasks` runs
//! this; in a workspace build the feature is on, and the commands are there.)

use std::process::Command;

fn mcp_tasks(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_mcp-tasks"))
        .args(args)
        .env_clear()
        .env("NO_COLOR", "1")
        .output()
        .expect("running mcp-tasks")
}

#[test]
#[cfg_attr(feature = "harness", ignore = "this build has the harnesses")]
fn bench_and_chaos_say_how_to_get_them() {
    let help = String::from_utf8_lossy(&mcp_tasks(&["--help"]).stdout).into_owned();
    assert!(help.contains("serve"), "{help}");
    assert!(
        !help.contains("bench") && !help.contains("chaos"),
        "the serving binary lists a harness: {help}"
    );
    for args in [
        &["bench", "push", "--streams", "3"][..],
        &["bench", "all", "--help"],
        &["chaos"],
    ] {
        let out = mcp_tasks(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("`mcp-tasks {}` is not in this build", args[0]))
                && stderr.contains("--features harness"),
            "{args:?}: {stderr}"
        );
    }
}

#[test]
#[cfg_attr(not(feature = "harness"), ignore = "this build has no harnesses")]
fn with_the_feature_bench_and_chaos_are_there() {
    let help = String::from_utf8_lossy(&mcp_tasks(&["--help"]).stdout).into_owned();
    assert!(help.contains("bench") && help.contains("chaos"), "{help}");
}
