//! What the service itself says about a task, when it (not a tool) moves it on: the status
//! messages of runs and resumptions, and the status message and JSON-RPC error of a task
//! it ends. The store records what happened (an [`EndReason`], the attempts) and passes
//! the running texts in; the words are all here.

use serde_json::json;

use crate::{ErrorObject, codes};

/// Status message of a task's first run.
pub const RUNNING: &str = "Running";

/// Status message of a run after an earlier worker was lost, with `{attempt}` for the
/// attempt number. A template, because the store claims many tasks in one statement,
/// each at its own attempt; [`running`] fills it in.
pub const RUNNING_AGAIN: &str = "Running again (attempt {attempt}; an earlier worker was lost)";

/// Status message of a task whose last outstanding input request was answered.
pub const INPUT_RECEIVED: &str = "Input received; resuming";

/// The status message of run number `attempt` (counted from 1).
pub fn running(attempt: i32) -> String {
    if attempt <= 1 {
        RUNNING.to_owned()
    } else {
        RUNNING_AGAIN.replace("{attempt}", &attempt.to_string())
    }
}

/// Why the service ended a task on its own account.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EndReason {
    /// The client cancelled it (`tasks/cancel`), and no run was left to record that.
    CancelledByClient,
    /// Its `ttlMs` passed before it finished.
    Expired,
    /// Its workers were lost on every attempt it had.
    CrashRecovery,
}

impl EndReason {
    /// The status message a client sees.
    pub const fn status_message(self) -> &'static str {
        match self {
            Self::CancelledByClient => "Cancelled at the client's request",
            Self::Expired => "Task has expired",
            Self::CrashRecovery => "CRASH_RECOVERY: the worker running this task was lost",
        }
    }

    /// The error of a task that ended `failed` for this reason, after `attempts` runs.
    pub fn error(self, attempts: i32) -> Option<ErrorObject> {
        match self {
            Self::CancelledByClient => None,
            Self::Expired => Some(ErrorObject::new(codes::INTERNAL_ERROR, "Task has expired")),
            Self::CrashRecovery => Some(
                ErrorObject::new(
                    codes::INTERNAL_ERROR,
                    format!(
                        "Task failed: the worker running it was lost {attempts} time(s) and no attempts are left"
                    ),
                )
                .with_data(json!({ "reason": "CRASH_RECOVERY", "attempts": attempts })),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_say_which_attempt_they_are() {
        assert_eq!(running(1), "Running");
        assert_eq!(
            running(2),
            "Running again (attempt 2; an earlier worker was lost)"
        );
        assert_eq!(
            running(13),
            "Running again (attempt 13; an earlier worker was lost)"
        );
    }

    #[test]
    fn ended_tasks_carry_the_texts_clients_have_always_seen() {
        assert_eq!(EndReason::CancelledByClient.error(1), None);
        assert_eq!(
            serde_json::to_value(EndReason::Expired.error(0)).expect("json"),
            json!({ "code": -32603, "message": "Task has expired" })
        );
        assert_eq!(
            serde_json::to_value(EndReason::CrashRecovery.error(3)).expect("json"),
            json!({
                "code": -32603,
                "message": "Task failed: the worker running it was lost 3 time(s) and no attempts are left",
                "data": { "reason": "CRASH_RECOVERY", "attempts": 3 }
            })
        );
        assert!(
            EndReason::CrashRecovery
                .status_message()
                .starts_with("CRASH_RECOVERY")
        );
    }
}
