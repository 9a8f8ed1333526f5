use super::*;

fn server() -> Server {
    Server::new(
        "http://127.0.0.1:9090/",
        Duration::from_secs(1),
        Duration::from_secs(180),
    )
}

/// The evaluation time of the answers below.
const NOW: f64 = 1700000000.5;

#[test]
fn a_vector_parses_into_samples() {
    let body = br#"{"status":"success","data":{"resultType":"vector","result":[
        {"metric":{"instance":"a:1","gpu":"3"},"value":[1700000000.5,"42"]},
        {"metric":{},"value":[1700000000.5,"NaN"]}]}}"#;
    let s = server().parse("q", 200, &body[..], NOW).unwrap();
    assert_eq!(s.len(), 2);
    assert_eq!(s[0].label("gpu"), "3");
    assert_eq!(s[0].label("missing"), "");
    assert!((s[0].value - 42.0).abs() < f64::EPSILON);
    assert!(s[1].value.is_nan());
}

#[test]
fn an_error_names_the_query_and_prometheus_words() {
    let body = br#"{"status":"error","errorType":"bad_data","error":"parse error at char 5"}"#;
    let e = server().parse("up{", 400, &body[..], NOW).unwrap_err();
    assert!(matches!(e, FleetError::Query { ref kind, .. } if kind == "bad_data"));
    assert!(e.to_string().contains("parse error at char 5"), "{e}");
    let e = server()
        .parse("up", 502, &b"<html>bad gateway"[..], NOW)
        .unwrap_err();
    assert!(e.to_string().contains("HTTP status 502"), "{e}");
    let scalar = br#"{"status":"success","data":{"resultType":"scalar","result":[1,"1"]}}"#;
    let e = server().parse("time()", 200, &scalar[..], NOW).unwrap_err();
    let not_json = |e: &FleetError| {
        matches!(
            e,
            FleetError::Answer {
                kind: AnswerError::NotJson(_),
                ..
            }
        )
    };
    assert!(not_json(&e), "{e}");
    let matrix = br#"{"status":"success","data":{"resultType":"matrix","result":[]}}"#;
    let e = server().parse("up[1m]", 200, &matrix[..], NOW).unwrap_err();
    assert!(
        matches!(e, FleetError::Answer { kind: AnswerError::NotVector(ref t), .. } if t == "matrix"),
        "{e}"
    );
    let text = br#"{"status":"success","data":{"resultType":"vector","result":[
        {"metric":{},"value":[1700000000,"many"]}]}}"#;
    let e = server().parse("up", 200, &text[..], NOW).unwrap_err();
    assert!(
        e.to_string().ends_with(r#"the value "many" is no number"#),
        "{e}"
    );
}

#[test]
fn a_trailing_slash_is_not_kept() {
    let s = Server::new(
        "https://prom.example/prometheus/",
        Duration::from_secs(1),
        Duration::from_secs(1),
    );
    assert_eq!(s.base(), "https://prom.example/prometheus");
}

fn unusable(body: &[u8], status: u16, now: f64) -> AnswerError {
    match server().parse("q", status, body, now) {
        Err(FleetError::Answer { kind, .. }) => kind,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_warning_makes_the_answer_unusable() {
    let body =
        br#"{"status":"success","warnings":["partial response: store \u001b[31m unreachable"],
        "data":{"resultType":"vector","result":[]}}"#;
    let e = unusable(body, 200, NOW);
    assert!(
        matches!(e, AnswerError::Warned(ref w, 1) if w.starts_with("partial")),
        "{e}"
    );
    // Written escaped, as every error is.
    let shown = crate::safe::fit(&e.to_string(), 200);
    assert!(
        !shown.contains('\x1b') && shown.contains("unreachable"),
        "{shown}"
    );
}

#[test]
fn an_answer_evaluated_far_from_now_is_unusable() {
    let body = br#"{"status":"success","data":{"resultType":"vector","result":[
        {"metric":{},"value":[1700000000.5,"1"]}]}}"#;
    assert!(server().parse("q", 200, &body[..], NOW + 179.0).is_ok());
    let days = NOW + 3.0 * 86400.0;
    let e = unusable(body, 200, days);
    assert!(matches!(e, AnswerError::Evaluated(s) if s < -86400.0));
    assert_eq!(
        e.to_string(),
        "evaluated 3d 0h ago, more than --max-age from now"
    );
    assert!(matches!(
        unusable(body, 200, NOW - 200.0),
        AnswerError::Evaluated(_)
    ));
}

#[test]
fn a_success_under_an_error_status_is_refused() {
    let body = br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
    assert!(matches!(
        unusable(body, 503, NOW),
        AnswerError::SuccessUnder(503)
    ));
}

#[test]
fn an_answer_over_the_series_or_label_bounds_is_unusable() {
    let one = r#"{"metric":{"a":"1"},"value":[1700000000.5,"1"]}"#;
    let many = vec![one; MAX_SERIES + 1].join(",");
    let body =
        format!(r#"{{"status":"success","data":{{"resultType":"vector","result":[{many}]}}}}"#);
    assert!(matches!(
        unusable(body.as_bytes(), 200, NOW),
        AnswerError::TooManySeries
    ));
    let labels: Vec<String> = (0..=MAX_LABELS).map(|i| format!(r#""l{i}":"v""#)).collect();
    let body = format!(
        r#"{{"status":"success","data":{{"resultType":"vector","result":[{{"metric":{{{}}},"value":[1700000000.5,"1"]}}]}}}}"#,
        labels.join(",")
    );
    let e = unusable(body.as_bytes(), 200, NOW);
    assert!(e.to_string().contains("over 64 labels"), "{e}");
}

#[test]
fn the_answers_share_one_byte_bound() {
    let budget = AtomicU64::new(10);
    let read = |n: usize| {
        let mut r = wire::Budgeted {
            inner: &vec![b' '; n][..],
            budget: &budget,
        };
        std::io::Read::read_to_end(&mut r, &mut Vec::new())
    };
    assert!(read(6).is_ok());
    let e = read(6).unwrap_err();
    assert!(
        e.get_ref().is_some_and(|e| e.is::<wire::OverBudget>()),
        "{e}"
    );
}

#[test]
fn a_redirect_is_not_followed_and_partial_answers_are_not_asked_for() {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let answered = std::thread::spawn(move || {
        let (mut c, _) = listener.accept().unwrap();
        let mut head = [0u8; 4096];
        let n = c.read(&mut head).unwrap_or(0);
        let asked = String::from_utf8_lossy(&head[..n]).into_owned();
        let reply = "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.2:1/\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
        c.write_all(reply.as_bytes()).unwrap();
        // A followed redirect would come back here.
        listener.set_nonblocking(true).unwrap();
        std::thread::sleep(Duration::from_millis(300));
        (asked, listener.accept().is_err())
    });
    let s = Server::new(
        &format!("http://{addr}"),
        Duration::from_secs(5),
        Duration::from_secs(60),
    );
    let e = s
        .query("up", Instant::now() + Duration::from_secs(5))
        .unwrap_err();
    assert!(
        matches!(e, FleetError::Answer { kind: AnswerError::Redirect(302, ref to), .. } if to.starts_with("http://127.0.0.2:1/")),
        "{e}"
    );
    let (asked, not_followed) = answered.join().unwrap();
    assert!(not_followed, "the redirect was followed");
    // Thanos and others: the whole answer or an error.
    assert!(asked.contains("&partial_response=false"), "{asked}");
}
