//! The lessons' demo sequence, end to end through an in-process replica and worker.

use crate::harness::TestApp;

#[tokio::test]
async fn demo_prints_the_lessons_sequence() {
    let app = TestApp::builder().packs("demo").workers(1).start().await;

    let mut out = Vec::new();
    let mut log = Vec::new();
    mcp_tasks_client::run_demo(app.url(), &mut out, &mut log)
        .await
        .expect("demo run");
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "id=0 resultType=complete status=ack\n\
         id=1 resultType=task status=working\n\
         id=2 resultType=complete status=working\n\
         id=3 resultType=complete status=input_required\n\
         id=4 resultType=complete status=ack\n\
         id=5 resultType=complete status=completed\n"
    );
    let log = String::from_utf8(log).unwrap();
    for method in ["tasks/status", "tasks/result", "tasks/list"] {
        assert!(
            log.contains(&format!("check {method}: HTTP 404 code -32601")),
            "{log}"
        );
    }
    app.stop().await;
}
