//! The wire crate against the official MCP material (`tests/official`): everything it
//! produces is valid under the official JSON Schemas (the 2026-07-28 core and the Tasks
//! extension), and every official example it should read, it reads.

mod official;

use mcp_tasks_wire::jsonrpc::{self, Payload};
use mcp_tasks_wire::listen;
use mcp_tasks_wire::results::{
    CacheHint, Implementation, Offered, discover_result, input_required_result, list_result,
    read_resource_result, text_result,
};
use mcp_tasks_wire::service_messages::EndReason;
use mcp_tasks_wire::strict::JsonLimits;
use mcp_tasks_wire::{
    ClientCapabilities, ErrorObject, Incoming, PROTOCOL_VERSION, RawTaskView, RequestId,
    RequestMeta, Response, TASKS_EXTENSION, TaskStatus, TaskView, codes, meta_keys,
};
use official::{Definitions, Schema};
use serde_json::{Map, Value, json};
use time::macros::datetime;

const STATUSES: [TaskStatus; 5] = [
    TaskStatus::Working,
    TaskStatus::InputRequired,
    TaskStatus::Completed,
    TaskStatus::Failed,
    TaskStatus::Cancelled,
];

fn server() -> Implementation {
    Implementation {
        name: "mcp-tasks".into(),
        version: "0.1.0".into(),
    }
}

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

fn stamped(mut result: Map<String, Value>) -> Value {
    server().stamp(&mut result, "complete");
    Value::Object(result)
}

fn response(result: Value) -> Value {
    Response::result(RequestId::from("req-1"), result).to_json()
}

/// A task in `status` the way the service fills it in: the official examples' input
/// requests, a stamped official `CallToolResult`, the errors the service composes.
fn views(status: TaskStatus) -> Vec<TaskView> {
    let input_requests = official::examples_of("InputRequests").remove(0);
    let call_result =
        server().stamped_call_tool_result(official::examples_of("CallToolResult").remove(0));
    let errors = match status {
        TaskStatus::Failed => vec![
            Some(ErrorObject::internal()),
            EndReason::Expired.error(1),
            EndReason::CrashRecovery.error(3),
            Some(ErrorObject::new(codes::INVALID_PARAMS, "Invalid params: x")),
        ],
        _ => vec![None],
    };
    let mut out = Vec::new();
    for error in errors {
        for (ttl_ms, poll_interval_ms, status_message) in [
            (None, None, None),
            (
                Some(3_600_000),
                Some(500),
                Some(EndReason::CancelledByClient.status_message().to_owned()),
            ),
        ] {
            out.push(TaskView {
                task_id: "0f8fad5b-d9cb-469f-a165-70867728950e".into(),
                status,
                status_message,
                created_at: datetime!(2026-07-28 12:00:00.5 UTC),
                last_updated_at: datetime!(2026-07-28 12:00:01 +02:00),
                ttl_ms,
                poll_interval_ms,
                input_requests: (status == TaskStatus::InputRequired)
                    .then(|| input_requests.clone()),
                result: (status == TaskStatus::Completed).then(|| call_result.clone()),
                error: error.clone(),
            });
        }
    }
    out
}

fn status_definition(status: TaskStatus) -> &'static str {
    match status {
        TaskStatus::Working => "WorkingTask",
        TaskStatus::InputRequired => "InputRequiredTask",
        TaskStatus::Completed => "CompletedTask",
        TaskStatus::Failed => "FailedTask",
        TaskStatus::Cancelled => "CancelledTask",
    }
}

#[test]
fn the_validator_accepts_every_official_example_and_refuses_a_broken_one() {
    // The harness itself: every example is valid under the definition it is filed under
    // (so the schemas, their $refs and the validator agree), and a broken one is not.
    let core = Definitions::load(Schema::Core);
    let names = core.names();
    let mut checked = 0;
    for example in official::examples() {
        assert!(
            names.contains(&example.definition),
            "{} is filed under {}, which the core schema does not define",
            example.path.display(),
            example.definition
        );
        let errors = core.errors(&example.definition, &example.json);
        assert!(
            errors.is_empty(),
            "{} is not a valid {}: {errors:?}",
            example.path.display(),
            example.definition
        );
        checked += 1;
    }
    assert!(checked > 100);
    let mut broken = official::examples_of("CallToolRequest").remove(0);
    broken["params"]["name"] = json!(7);
    assert!(!core.errors("CallToolRequest", &broken).is_empty());
    let tasks = Definitions::load(Schema::Tasks);
    let mut task = Value::Object(views(TaskStatus::Failed).remove(0).detailed());
    task.as_object_mut().expect("object").remove("error");
    assert!(!tasks.errors("FailedTask", &task).is_empty());
}

#[test]
fn tasks_in_every_status_match_the_tasks_extension() {
    let tasks = Definitions::load(Schema::Tasks);
    let core = Definitions::load(Schema::Core);
    for status in STATUSES {
        for view in views(status) {
            let detailed = Value::Object(view.detailed());
            tasks.check("DetailedTask", &detailed);
            tasks.check(status_definition(status), &detailed);
            tasks.check("Task", &detailed);

            let get = stamped(view.get_result());
            tasks.check("GetTaskResult", &get);
            core.check("Result", &get);
            core.check("JSONRPCResultResponse", &response(get));

            let create = stamped(view.create_result());
            tasks.check("CreateTaskResult", &create);
            core.check("JSONRPCResultResponse", &response(create));
        }
    }
}

/// The view as `tasks/get` reads it: its JSON as text, as PostgreSQL prints jsonb (with
/// spaces after `:` and `,`).
fn raw(view: &TaskView) -> RawTaskView {
    let text = |v: &Value| {
        let pretty = serde_json::to_string(v).expect("json");
        let spaced = pretty.replace("\":", "\": ").replace(",\"", ", \"");
        serde_json::value::RawValue::from_string(spaced).expect("raw")
    };
    RawTaskView {
        task_id: view.task_id.clone(),
        status: view.status,
        status_message: view.status_message.clone(),
        created_at: view.created_at,
        last_updated_at: view.last_updated_at,
        ttl_ms: view.ttl_ms,
        poll_interval_ms: view.poll_interval_ms,
        input_requests: view.input_requests.as_ref().map(text),
        result: view.result.as_ref().map(text),
        error: view.error.clone(),
    }
}

#[test]
fn the_serialized_get_result_is_the_parsed_one_and_matches_the_tasks_extension() {
    let tasks = Definitions::load(Schema::Tasks);
    let core = Definitions::load(Schema::Core);
    for status in STATUSES {
        for view in views(status) {
            let raw = raw(&view);
            let text = raw.get_result_json(&server());
            let get: Value = serde_json::from_str(text.as_str()).expect("json");
            assert_eq!(get, stamped(view.get_result()), "{status:?}");
            tasks.check("GetTaskResult", &get);
            let id = RequestId::from("req-1");
            let body = Response::serialized_result_body(&id, &text);
            let body: Value = serde_json::from_str(&body).expect("json");
            assert_eq!(body, response(get.clone()));
            core.check("JSONRPCResultResponse", &body);
            // The stored text is copied as it is, spacing and all.
            if let Some(stored) = &raw.result {
                assert!(text.as_str().contains(stored.get()), "{status:?}");
            }
            if let Some(stored) = &raw.input_requests {
                assert!(text.as_str().contains(stored.get()), "{status:?}");
            }
            assert_eq!(raw.parsed().expect("parses"), view);
        }
        // Nothing stored: the same defaults as the parsed view's.
        let mut bare = views(status).remove(0);
        (bare.result, bare.input_requests, bare.error) = (None, None, None);
        let get: Value =
            serde_json::from_str(raw(&bare).get_result_json(&server()).as_str()).expect("json");
        assert_eq!(get, stamped(bare.get_result()), "{status:?} bare");
        tasks.check("GetTaskResult", &get);
    }
}

#[test]
fn a_stored_result_with_the_legacy_related_task_key_loses_it() {
    let mut view = views(TaskStatus::Completed).remove(0);
    let mut result = view.result.take().expect("result");
    result["_meta"][meta_keys::LEGACY_RELATED_TASK] = json!({ "taskId": "t1" });
    view.result = Some(result);
    let get: Value =
        serde_json::from_str(raw(&view).get_result_json(&server()).as_str()).expect("json");
    assert!(
        get["result"]["_meta"]
            .get(meta_keys::LEGACY_RELATED_TASK)
            .is_none(),
        "{get}"
    );
    assert!(
        get["result"]["_meta"][meta_keys::SERVER_INFO].is_object(),
        "{get}"
    );
    assert_eq!(get, stamped(view.get_result()));
}

#[test]
fn task_notifications_match_the_tasks_extension() {
    let tasks = Definitions::load(Schema::Tasks);
    let core = Definitions::load(Schema::Core);
    for sub_id in [json!("listen-1"), json!(42)] {
        for status in STATUSES {
            for view in views(status) {
                let message = listen::task_notification(&view.detailed(), &sub_id);
                tasks.check("TaskStatusNotification", &message);
                tasks.check("TaskStatusNotificationParams", &message["params"]);
                core.check("JSONRPCNotification", &message);
                assert_eq!(
                    message["params"]["_meta"][meta_keys::SUBSCRIPTION_ID],
                    sub_id
                );
            }
        }
    }
}

#[test]
fn the_listen_acknowledgement_and_result_match_the_core_schema() {
    let core = Definitions::load(Schema::Core);
    let tasks = Definitions::load(Schema::Tasks);
    let ids = ["a".to_owned(), "b".to_owned()];
    for sub_id in [json!("listen-1"), json!(7)] {
        for agreed in [None, Some(&ids[..0]), Some(&ids[..])] {
            let ack = listen::acknowledgement(&sub_id, agreed);
            core.check("SubscriptionsAcknowledgedNotification", &ack);
            core.check("ServerNotification", &ack);
            tasks.check(
                "TaskSubscriptionAcknowledgedNotifications",
                &ack["params"]["notifications"],
            );
            assert_eq!(
                ack["params"]["notifications"].get("taskIds").is_some(),
                agreed.is_some()
            );
        }
        let result = stamped(listen::listen_result(&sub_id));
        core.check("SubscriptionsListenResult", &result);
        let id: RequestId = serde_json::from_value(sub_id.clone()).expect("request id");
        let end = Response::result(id, result).to_json();
        core.check("SubscriptionsListenResultResponse", &end);
    }
}

#[test]
fn discover_and_list_results_with_cache_hints_match_the_core_schema() {
    let core = Definitions::load(Schema::Core);
    for cache in [
        CacheHint {
            ttl_ms: 0,
            public: false,
        },
        CacheHint {
            ttl_ms: 3_600_000,
            public: true,
        },
    ] {
        let everything = Offered {
            resources: true,
            prompts: true,
            completions: true,
        };
        for (instructions, offered) in [
            (None, Offered::default()),
            (Some("Call generate_report."), everything),
        ] {
            let discover = stamped(discover_result(instructions, cache, offered));
            assert_eq!(
                discover["capabilities"].get("completions").is_some(),
                offered.completions
            );
            core.check("DiscoverResult", &discover);
            core.check("ServerCapabilities", &discover["capabilities"]);
            core.check("DiscoverResultResponse", &response(discover.clone()));
            // The Tasks extension is announced under the key the official example uses.
            let official_caps = official::examples()
                .into_iter()
                .find(|e| e.path.ends_with("ServerCapabilities/extensions-tasks.json"))
                .expect("the extensions-tasks example")
                .json;
            assert_eq!(
                discover["capabilities"]["extensions"][TASKS_EXTENSION],
                official_caps["extensions"][TASKS_EXTENSION]
            );
        }
        let tools: Vec<Value> = official::examples_of("Tool");
        for (key, items, definition) in [
            ("tools", json!(tools), "ListToolsResult"),
            ("tools", json!([]), "ListToolsResult"),
            ("prompts", json!([]), "ListPromptsResult"),
            ("resources", json!([]), "ListResourcesResult"),
            (
                "resourceTemplates",
                json!([]),
                "ListResourceTemplatesResult",
            ),
        ] {
            let list = stamped(list_result(key, items, Some("next".into()), cache));
            core.check(definition, &list);
            core.check("CacheableResult", &list);
            core.check(&format!("{definition}Response"), &response(list));
        }
        let read = stamped(read_resource_result(
            json!([{ "uri": "test://x", "mimeType": "text/plain", "text": "x" }]),
            cache,
        ));
        core.check("ReadResourceResult", &read);
        core.check("CacheableResult", &read);
    }
}

#[test]
fn input_required_and_tool_results_match_the_core_schema() {
    let core = Definitions::load(Schema::Core);
    for requests in official::examples_of("InputRequests") {
        let result = stamped(input_required_result(
            object(requests),
            "c3RhdGU.dGFn".into(),
        ));
        core.check("InputRequiredResult", &result);
        core.check("ServerResult", &result);
        core.check("JSONRPCResultResponse", &response(result));
    }
    for example in official::examples_of("CallToolResult") {
        let result = server().stamped_call_tool_result(example);
        core.check("CallToolResult", &result);
        core.check("CallToolResultResponse", &response(result));
    }
    for is_error in [false, true] {
        let result = server().stamped_call_tool_result(text_result("done", is_error));
        core.check("CallToolResult", &result);
    }
}

#[test]
fn every_error_we_emit_matches_the_core_schema() {
    let core = Definitions::load(Schema::Core);
    let cases: Vec<(ErrorObject, &str)> = vec![
        (
            ErrorObject::parse_error("expected value at line 1"),
            "ParseError",
        ),
        (
            ErrorObject::invalid_request("\"method\" is missing"),
            "InvalidRequestError",
        ),
        (
            ErrorObject::method_not_found("tasks/list"),
            "MethodNotFoundError",
        ),
        (
            ErrorObject::invalid_params("params.name is required"),
            "InvalidParamsError",
        ),
        (
            ErrorObject::invalid_params("too large")
                .with_data(json!({ "limit": "argument_bytes", "max": 262_144 })),
            "InvalidParamsError",
        ),
        (ErrorObject::internal(), "InternalError"),
        (
            EndReason::Expired.error(1).expect("an expiry error"),
            "InternalError",
        ),
        (
            EndReason::CrashRecovery
                .error(3)
                .expect("a crash-recovery error"),
            "InternalError",
        ),
        (
            ErrorObject::header_mismatch("Mcp-Method says tools/list"),
            "Error",
        ),
        (
            ErrorObject::unsupported_version("2025-11-25", &[PROTOCOL_VERSION]),
            "Error",
        ),
        (ErrorObject::tasks_extension_required(), "Error"),
        (
            ErrorObject::missing_capability(
                "needs elicitation",
                json!({ "elicitation": { "form": {} } }),
            ),
            "Error",
        ),
    ];
    let mut codes_seen = std::collections::BTreeSet::new();
    for (error, definition) in cases {
        codes_seen.insert(error.code);
        let object = serde_json::to_value(&error).expect("an error serializes");
        core.check("Error", &object);
        core.check(definition, &object);
        for id in [Some(RequestId::from(1)), Some(RequestId::from("a")), None] {
            let message = Response::error(id, error.clone()).to_json();
            core.check("JSONRPCErrorResponse", &message);
            core.check("JSONRPCMessage", &message);
            let response_definition = match error.code {
                codes::HEADER_MISMATCH => Some("HeaderMismatchError"),
                codes::MISSING_REQUIRED_CLIENT_CAPABILITY => {
                    Some("MissingRequiredClientCapabilityError")
                }
                codes::UNSUPPORTED_PROTOCOL_VERSION => Some("UnsupportedProtocolVersionError"),
                _ => None,
            };
            if let Some(d) = response_definition {
                core.check(d, &message);
            }
        }
    }
    // Every code the service emits was checked.
    let all = [
        codes::PARSE_ERROR,
        codes::INVALID_REQUEST,
        codes::METHOD_NOT_FOUND,
        codes::INVALID_PARAMS,
        codes::INTERNAL_ERROR,
        codes::HEADER_MISMATCH,
        codes::MISSING_REQUIRED_CLIENT_CAPABILITY,
        codes::UNSUPPORTED_PROTOCOL_VERSION,
    ];
    assert_eq!(codes_seen, all.into_iter().collect());
}

fn is_client_request(core_document: &Value, definition: &str) -> bool {
    core_document["$defs"]["ClientRequest"]["anyOf"]
        .as_array()
        .expect("ClientRequest.anyOf")
        .iter()
        .any(|r| r["$ref"] == format!("#/$defs/{definition}"))
}

#[test]
fn every_official_message_parses_through_our_envelope() {
    let core_document = Schema::Core.document();
    let (mut requests, mut notifications) = (0, 0);
    for example in official::examples() {
        let json = &example.json;
        if json.get("jsonrpc").is_none() || json.get("method").is_none() {
            continue;
        }
        let body = serde_json::to_vec(json).expect("bytes");
        let name = example.path.display();
        let parsed = jsonrpc::parse_message(&body, JsonLimits::default())
            .unwrap_or_else(|e| panic!("{name}: refused: {:?}", e.error));
        let params = json.get("params").cloned().unwrap_or_else(|| json!({}));
        match parsed {
            Incoming::Request(request) => {
                requests += 1;
                assert_eq!(request.id.to_value(), json["id"], "{name}");
                assert_eq!(request.method, json["method"], "{name}");
                assert_eq!(Value::Object(request.params.clone()), params, "{name}");
                if is_client_request(&core_document, &example.definition) {
                    let meta = RequestMeta::from_params(&request.params)
                        .unwrap_or_else(|e| panic!("{name}: _meta refused: {e}"));
                    let sent = &json["params"]["_meta"];
                    assert_eq!(
                        meta.protocol_version,
                        sent[meta_keys::PROTOCOL_VERSION],
                        "{name}"
                    );
                    assert_eq!(
                        Value::Object(meta.client_capabilities.0.clone()),
                        sent[meta_keys::CLIENT_CAPABILITIES],
                        "{name}"
                    );
                    assert_eq!(
                        meta.client_info.as_ref(),
                        sent.get(meta_keys::CLIENT_INFO),
                        "{name}"
                    );
                    assert_eq!(
                        meta.progress_token.as_ref(),
                        sent.get("progressToken"),
                        "{name}"
                    );
                }
            }
            Incoming::Notification(notification) => {
                notifications += 1;
                assert!(json.get("id").is_none(), "{name}");
                assert_eq!(notification.method, json["method"], "{name}");
            }
        }
    }
    // Every client request the core defines has an example, and each was read.
    let client_requests = core_document["$defs"]["ClientRequest"]["anyOf"]
        .as_array()
        .expect("ClientRequest.anyOf")
        .len();
    assert!(requests >= client_requests, "{requests} requests read");
    assert!(notifications > 0);
}

#[test]
fn every_official_response_reads_back_unchanged() {
    let mut read = 0;
    for example in official::examples() {
        let json = &example.json;
        let is_response = json.get("jsonrpc").is_some()
            && json.get("method").is_none()
            && (json.get("result").is_some() || json.get("error").is_some());
        if !is_response {
            continue;
        }
        let name = example.path.display();
        let response: Response = serde_json::from_value(json.clone())
            .unwrap_or_else(|e| panic!("{name}: not read as a response: {e}"));
        match &response.payload {
            Payload::Result(result) => assert_eq!(result, &json["result"], "{name}"),
            Payload::Error(error) => {
                assert_eq!(error.code, json["error"]["code"], "{name}");
                assert_eq!(error.message, json["error"]["message"], "{name}");
                assert_eq!(error.data.as_ref(), json["error"].get("data"), "{name}");
            }
        }
        assert_eq!(
            response.id.as_ref().map(RequestId::to_value),
            json.get("id").cloned(),
            "{name}"
        );
        assert_eq!(
            &response.to_json(),
            json,
            "{name}: does not write back as it was"
        );
        read += 1;
    }
    assert!(read >= 10, "only {read} responses read");
}

#[test]
fn every_official_error_object_reads_back_unchanged() {
    let mut read = 0;
    for definition in [
        "ParseError",
        "InvalidParamsError",
        "MethodNotFoundError",
        "InternalError",
    ] {
        for json in official::examples_of(definition) {
            let error: ErrorObject = serde_json::from_value(json.clone())
                .unwrap_or_else(|e| panic!("{definition}: not read as an error: {e}"));
            assert_eq!(
                serde_json::to_value(&error).expect("json"),
                json,
                "{definition}"
            );
            read += 1;
        }
    }
    assert!(read >= 4);
}

#[test]
fn official_client_capabilities_read_as_declared() {
    for caps in official::examples_of("ClientCapabilities") {
        let declared = ClientCapabilities(object(caps.clone()));
        assert!(declared.satisfies(&caps), "{caps} does not satisfy itself");
        assert!(declared.satisfies(&json!({})));
        assert!(
            !declared.declares_tasks(),
            "{caps} declares no Tasks extension"
        );
        for key in object(caps.clone()).keys() {
            if key != "extensions" {
                assert!(
                    declared.satisfies(&json!({ key.clone(): {} })),
                    "{caps} should satisfy {{{key:?}: {{}}}}"
                );
            }
        }
    }
    let mut with_tasks = object(official::examples_of("ClientCapabilities").remove(0));
    with_tasks.insert("extensions".into(), json!({ TASKS_EXTENSION: {} }));
    assert!(ClientCapabilities(with_tasks).declares_tasks());
}

/// Every official primitive schema, as a property of a requested schema, reads as the
/// field it describes; and the official elicitation requests read whole.
#[test]
fn official_requested_schemas_read_as_typed_fields() {
    use mcp_tasks_wire::requested_schema::{Choice, Field, Format, Kind, RequestedSchema};

    fn field(definition: &str) -> Field {
        let property = official::examples_of(definition).remove(0);
        let schema = json!({ "type": "object", "properties": { "f": property } });
        let mut read =
            RequestedSchema::parse(Some(&schema)).unwrap_or_else(|e| panic!("{definition}: {e}"));
        assert_eq!(read.fields.len(), 1);
        read.fields.remove(0)
    }
    fn choices(pairs: &[(&str, &str)]) -> Vec<Choice> {
        pairs
            .iter()
            .map(|(v, l)| Choice {
                value: (*v).into(),
                label: (*l).into(),
            })
            .collect()
    }
    let rgb = choices(&[("Red", "Red"), ("Green", "Green"), ("Blue", "Blue")]);
    let hex = choices(&[
        ("#FF0000", "Red"),
        ("#00FF00", "Green"),
        ("#0000FF", "Blue"),
    ]);

    assert_eq!(
        field("BooleanSchema").kind,
        Kind::Boolean {
            default: Some(false)
        }
    );
    assert_eq!(
        field("NumberSchema").kind,
        Kind::Number {
            integer: false,
            minimum: Some(0.0),
            maximum: Some(100.0),
            default: Some(50.into())
        }
    );
    let string = field("StringSchema");
    assert_eq!(
        (string.title.as_deref(), string.description.as_deref()),
        (Some("Display Name"), Some("Description text"))
    );
    assert_eq!(
        string.kind,
        Kind::Text {
            format: Some(Format::Email),
            min_length: Some(3),
            max_length: Some(50),
            default: Some("user@example.com".into())
        }
    );
    assert_eq!(
        field("UntitledSingleSelectEnumSchema").kind,
        Kind::Select {
            choices: rgb.clone(),
            default: Some("Red".into())
        }
    );
    assert_eq!(
        field("TitledSingleSelectEnumSchema").kind,
        Kind::Select {
            choices: hex.clone(),
            default: Some("#FF0000".into())
        }
    );
    assert_eq!(
        field("UntitledMultiSelectEnumSchema").kind,
        Kind::MultiSelect {
            choices: rgb,
            min_items: Some(1),
            max_items: Some(2),
            default: vec!["Red".into(), "Green".into()]
        }
    );
    assert_eq!(
        field("TitledMultiSelectEnumSchema").kind,
        Kind::MultiSelect {
            choices: hex,
            min_items: Some(1),
            max_items: Some(2),
            default: vec!["#FF0000".into(), "#00FF00".into()]
        }
    );

    for params in official::examples_of("ElicitRequestFormParams")
        .into_iter()
        .chain(
            official::examples_of("ElicitRequest")
                .into_iter()
                .map(|r| r["params"].clone()),
        )
    {
        let read = RequestedSchema::parse(params.get("requestedSchema"))
            .unwrap_or_else(|e| panic!("{params}: {e}"));
        let names: Vec<&str> = read.fields.iter().map(|f| f.name.as_str()).collect();
        assert!(names.contains(&"name"), "{params}");
        assert!(read.fields.iter().any(|f| f.name == "name" && f.required));
    }
}
