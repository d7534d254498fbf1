//! Every kind of field an elicitation form may hold, asked in a pseudo-terminal: numbers
//! and strings checked as they are typed (a wrong answer is explained and asked again),
//! an enum chosen from a list, an optional field left empty, a boolean, a checklist.

use std::time::Duration;

use mcp_tasks_tools::{Elicitation, ExecutionPolicy, InputRequests, Outcome, Registry, Tool};
use serde_json::{Value, json};

use super::*;
use crate::harness::{Replica, TestDb, Worker, http};

/// `profile`: asks for one form and returns what it got as `structuredContent`.
fn profile_registry() -> Registry {
    let tool = Tool::builder("profile")
        .description("Asks for a profile, then shows it.")
        .input_schema(json!({ "type": "object", "properties": {} }))
        .policy(ExecutionPolicy::TaskOptional)
        .poll_interval(Duration::from_millis(200))
        .handler(|ctx| async move {
            match ctx.elicitation("profile") {
                Some(Elicitation::Accept(content)) => Ok(Outcome::structured(
                    "Profile received.",
                    Value::Object(content.clone()),
                )),
                Some(_) => Ok(Outcome::text("No profile.")),
                None => Ok(Outcome::NeedInput(InputRequests::new().elicit(
                    "profile",
                    "Tell us about you.",
                    json!({
                        "type": "object",
                        "properties": {
                            "age": { "type": "integer", "minimum": 0, "maximum": 130, "title": "Age" },
                            "color": { "type": "string", "title": "Favourite colour", "oneOf": [
                                { "const": "red", "title": "Red" },
                                { "const": "green", "title": "Green" },
                                { "const": "blue", "title": "Blue" }
                            ] },
                            "email": { "type": "string", "format": "email", "title": "E-mail" },
                            "nickname": { "type": "string", "maxLength": 8, "title": "Nickname" },
                            "subscribe": { "type": "boolean", "title": "Subscribe" },
                            "tags": { "type": "array", "title": "Tags", "minItems": 1,
                                "items": { "type": "string", "enum": ["alpha", "beta", "gamma"] } }
                        },
                        "required": ["age", "color", "email", "subscribe", "tags"]
                    }),
                ))),
            }
        })
        .build()
        .expect("tool");
    Registry::new(vec![tool]).expect("registry")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_form_field_is_asked_and_checked() {
    let db = TestDb::new().await;
    let replica = Replica::start(&db.store, profile_registry()).await;
    let worker = Worker::start(&db.store, profile_registry());
    let fx = Fixture::with_app(TestApp {
        db,
        replicas: vec![replica],
        workers: vec![worker],
        http: http::client(),
    });
    let (screen, rest, code) = fx
        .pty(&["call", "profile"], |s| {
            let mut screen = expect(s, "Tell us about you.");
            screen += &respond(s);
            screen += &expect(s, "Age");
            send(s, "abc\r");
            screen += &expect(s, "a whole number is required");
            // The wrong text stays in the field: clear it, then a number out of range.
            send(s, "\x7f\x7f\x7f200\r");
            screen += &expect(s, "at most 130");
            send(s, "\x7f\x7f\x7f42\r");
            screen += &expect(s, "Favourite colour");
            screen += &expect(s, "Blue");
            send(s, DOWN);
            send(s, ENTER);
            screen += &expect(s, "E-mail");
            send(s, "ann\r");
            screen += &expect(s, "not a valid email");
            send(s, "\x7f\x7f\x7fann@example.org\r");
            screen += &expect(s, "Nickname [optional]");
            send(s, ENTER);
            screen += &expect(s, "Subscribe");
            send(s, "y");
            screen += &expect(s, "Tags");
            screen += &expect(s, "gamma");
            // None chosen: refused (minItems); then the second one.
            send(s, ENTER);
            screen += &expect(s, "Choose at least 1");
            screen += &expect(s, "gamma");
            send(s, DOWN);
            send(s, " ");
            send(s, ENTER);
            screen += &expect(s, "Profile received.");
            let (rest, code) = exit_code(s);
            (screen, rest, code)
        })
        .await;
    assert_eq!(code, 0, "{screen}{rest}");
    // What follows the text is structuredContent, as JSON.
    let structured: Value = serde_json::from_str(rest.trim())
        .unwrap_or_else(|e| panic!("structuredContent is not JSON ({e}): {rest}"));
    assert_eq!(
        structured,
        json!({ "age": 42, "color": "green", "email": "ann@example.org", "subscribe": true, "tags": ["beta"] })
    );
    fx.stop().await;
}
