//! The client in a pseudo-terminal: prompts answered with keystrokes, Ctrl-C, a client
//! killed mid-task and resumed.

use std::time::Duration;

use super::*;
use crate::harness::status;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generate_report_run_shows_its_status_and_its_approval_prompt_is_answered() {
    let fx = Fixture::start().await;
    let (screen, code) = fx
        .pty(&["call", "generate_report", "--arg", "size=medium"], |s| {
            let mut screen = expect(s, "started.");
            // The live status line: spinner, status, statusMessage, elapsed.
            screen += &expect_regex(
                s,
                r"working: Preparing the medium report outline\. \[\d+s\]",
            );
            screen += &expect(
                s,
                "Approve the generated report outline? (Summary, Findings, Recommendations)",
            );
            screen += &approve_outline(s);
            screen += &expect_regex(s, r"working: Writing the medium report\.");
            screen += &expect(s, "Generated medium report with approved outline.");
            to_exit(s, screen)
        })
        .await;
    assert_eq!(code, 0, "{screen}");
    // structuredContent, as JSON.
    assert!(screen.contains(r#""approved": true"#), "{screen}");
    assert!(screen.contains(r#""size": "medium""#), "{screen}");
    assert!(
        fx.state_ids().is_empty(),
        "a finished task leaves the state file"
    );
    fx.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_before_the_task_and_a_declined_request_are_asked_in_the_terminal() {
    let fx = Fixture::start().await;
    // MRTR: the name is asked before the server creates the task; a string field.
    let (screen, code) = fx
        .pty(&["call", "test_tool_with_task"], |s| {
            let mut screen = expect(s, "What is your name?");
            screen += &respond(s);
            screen += &expect(s, "name");
            send(s, "Ann\r");
            screen += &expect(s, "Hello, Ann! (from a task)");
            to_exit(s, screen)
        })
        .await;
    assert_eq!(code, 0, "{screen}");

    // Declining completes confirm_delete without deleting: exit 5, not 0.
    let (screen, code) = fx
        .pty(
            &["call", "confirm_delete", "--arg", "filename=notes.txt"],
            |s| {
                let mut screen = expect(s, "Delete notes.txt?");
                screen += &expect(s, "How do you respond?");
                send(s, DOWN);
                send(s, ENTER);
                screen += &expect(s, "Kept notes.txt: deletion was not confirmed.");
                to_exit(s, screen)
            },
        )
        .await;
    assert_eq!(code, 5, "{screen}");
    fx.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_wait_prints_the_task_id_and_tasks_wait_finishes_it() {
    let fx = Fixture::start().await;
    let out = fx.run(&["call", "generate_report", "--no-wait"]).await;
    assert_code(&out, 0);
    let id = stdout(&out).trim().to_owned();
    assert!(uuid::Uuid::parse_str(&id).is_ok(), "not a task id: {id:?}");
    assert_eq!(fx.state_ids(), vec![id.clone()]);
    assert_ne!(status(&fx.task(&id).await), "completed");

    let (screen, code) = fx
        .pty(&["tasks", "wait", &id], |s| {
            let mut screen = expect(s, "Approve the generated report outline?");
            screen += &approve_outline(s);
            screen += &expect(s, "Generated small report with approved outline.");
            to_exit(s, screen)
        })
        .await;
    assert_eq!(code, 0, "{screen}");
    assert_eq!(status(&fx.task(&id).await), "completed");
    assert!(fx.state_ids().is_empty());
    fx.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_killed_mid_task_is_picked_up_by_tasks_resume() {
    let fx = Fixture::start().await;
    let screen = fx
        .pty(&["call", "generate_report", "--arg", "size=large"], |s| {
            let screen = expect(s, "Preparing the large report outline.");
            s.process_mut()
                .kill(rexpect::process::signal::Signal::SIGKILL)
                .expect("kill");
            screen
        })
        .await;
    let ids = fx.state_ids();
    assert_eq!(
        ids.len(),
        1,
        "the killed client's task is in the state file: {screen}"
    );
    let id = ids[0].clone();
    assert!(screen.contains(&id), "{screen}");

    let (screen, code) = fx
        .pty(&["tasks", "resume"], move |s| {
            let mut screen = expect(s, &format!("Resuming task {id} (generate_report)."));
            screen += &approve_outline(s);
            screen += &expect(s, "Generated large report with approved outline.");
            to_exit(s, screen)
        })
        .await;
    assert_eq!(code, 0, "{screen}");
    assert_eq!(status(&fx.task(&ids[0]).await), "completed");
    assert!(fx.state_ids().is_empty());
    fx.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_cancels_the_task_or_detaches_from_it() {
    let fx = Fixture::start().await;
    let (screen, code) = fx
        .pty(&["call", "slow_compute", "--arg", "seconds=60"], |s| {
            let mut screen = expect_regex(s, r"Computing job: [1-9] of 60 s");
            screen += &ctrl_c(s);
            // Keep waiting: the status line comes back, and the next Ctrl-C asks again.
            send(s, DOWN);
            send(s, DOWN);
            send(s, ENTER);
            screen += &expect_regex(s, r"Computing job: [1-9]+ of 60 s");
            screen += &ctrl_c(s);
            send(s, ENTER);
            screen += &expect(s, "was cancelled");
            to_exit(s, screen)
        })
        .await;
    assert_eq!(code, 4, "{screen}");
    assert!(fx.state_ids().is_empty(), "{screen}");

    let (screen, code) = fx
        .pty(&["call", "slow_compute", "--arg", "seconds=60"], |s| {
            let mut screen = expect_regex(s, r"Computing job: [0-9] of 60 s");
            screen += &ctrl_c(s);
            send(s, DOWN);
            send(s, ENTER);
            screen += &expect(s, "Detached from task");
            to_exit(s, screen)
        })
        .await;
    assert_eq!(code, 6, "{screen}");
    let ids = fx.state_ids();
    assert_eq!(ids.len(), 1, "a detached task stays resumable: {screen}");
    assert_eq!(status(&fx.task(&ids[0]).await), "working");

    // `tasks cancel` from another client ends it.
    let out = fx.run(&["tasks", "cancel", &ids[0]]).await;
    assert_code(&out, 0);
    assert!(stderr(&out).contains("was cancelled"), "{}", stderr(&out));
    assert_eq!(status(&fx.task(&ids[0]).await), "cancelled");
    assert!(fx.state_ids().is_empty());

    // Ctrl-C at an input prompt offers the same choice; cancelling a task that waits
    // for input ends it at once.
    let (screen, code) = fx
        .pty(&["call", "generate_report"], |s| {
            let mut screen = expect(s, "How do you respond?");
            screen += &expect(s, "Cancel (dismiss)");
            // Ctrl-C reaches a prompt as a key once it reads the terminal (raw mode),
            // an instant after it is drawn.
            std::thread::sleep(Duration::from_millis(300));
            screen += &ctrl_c(s);
            send(s, ENTER);
            screen += &expect(s, "was cancelled");
            to_exit(s, screen)
        })
        .await;
    assert_eq!(code, 4, "{screen}");
    assert!(fx.state_ids().is_empty(), "{screen}");
    fx.stop().await;
}

/// Answers generate_report's outline approval: answer it, then yes.
fn approve_outline(s: &mut PtySession) -> String {
    let screen = respond(s) + &expect(s, "Approve the outline");
    send(s, "y");
    screen
}

/// Presses Ctrl-C while the client waits, and waits for the choice it offers.
fn ctrl_c(s: &mut PtySession) -> String {
    s.send_control('c').expect("Ctrl-C");
    let screen = expect(s, "Ctrl-C: what about task");
    screen + &expect(s, "Keep waiting")
}
