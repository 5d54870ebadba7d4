//! The scripted model server answers what a test scripts, in the wire format of each API, and
//! records every request.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;

use serde_json::json;
use spex_modelserver::{Api, ModelServer, Reply};

/// POSTs `body` to `path` over a plain HTTP/1.1 connection that closes after the answer; returns
/// the status line and everything after the head (the body as sent, possibly cut off).
fn post(server: &ModelServer, path: &str, body: &serde_json::Value) -> (String, String) {
    let addr = server.url().trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(&addr).expect("the server listens");
    let body = body.to_string();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("the request is written");
    let mut answer = Vec::new();
    // A dropped stream ends the read with an error or early; what arrived is what counts.
    let _partial = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (head, rest) = answer.split_once("\r\n\r\n").unwrap_or((&answer, ""));
    (head.lines().next().unwrap_or("").to_owned(), rest.to_owned())
}

fn main_request(stream: bool) -> serde_json::Value {
    json!({
        "model": "m", "stream": stream,
        "tools": [{"name": "Bash"}, {"name": "shell_command"}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hello there"}]}],
    })
}

#[test]
fn anthropic_replies_stream_in_order_and_requests_are_recorded() {
    let server = ModelServer::start().unwrap();
    server.script(
        Api::Anthropic,
        [
            Reply::Shell("echo hi".into()),
            Reply::Text("all done".into()),
            Reply::Status(500),
            Reply::Drop,
        ],
    );
    let (status, body) = post(&server, "/v1/messages?beta=true", &main_request(true));
    assert!(status.contains("200"), "{status}");
    let events: Vec<&str> = body.lines().filter_map(|line| line.strip_prefix("event: ")).collect();
    assert_eq!(
        events,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert!(body.contains(r#""name":"Bash""#) && body.contains("echo hi"), "{body}");
    assert!(body.contains(r#""stop_reason":"tool_use""#));

    // A side request (no tools) takes no scripted reply.
    let (_, side) = post(&server, "/v1/messages", &json!({"model": "m", "stream": true}));
    assert!(side.contains(r#""text":"ok""#), "{side}");

    let (_, body) = post(&server, "/v1/messages", &main_request(true));
    assert!(body.contains("all done") && body.contains(r#""stop_reason":"end_turn""#));
    let (status, _) = post(&server, "/v1/messages", &main_request(true));
    assert!(status.contains("500"), "{status}");
    let (status, body) = post(&server, "/v1/messages", &main_request(true));
    assert!(status.contains("200"), "{status}");
    assert!(body.contains("message_start"), "{body}");
    assert!(!body.contains("message_stop"), "the stream is cut before its end: {body}");

    let requests = server.requests();
    assert_eq!(requests.len(), 5);
    assert_eq!(requests.iter().filter(|request| request.main).count(), 4);
    assert!(requests[0].texts().iter().any(|text| text == "hello there"));
    assert_eq!(requests[0].path, "/v1/messages?beta=true");
    assert_eq!(server.unused(Api::Anthropic), 0);
}

#[test]
fn responses_call_the_shell_tool_the_request_offers() {
    let server = ModelServer::start().unwrap();
    server.script(Api::Responses, [Reply::Shell("ls -l".into()), Reply::Text("fine".into())]);
    let (_, body) = post(&server, "/v1/responses", &main_request(true));
    let events: Vec<&str> = body.lines().filter_map(|line| line.strip_prefix("event: ")).collect();
    assert_eq!(
        events,
        [
            "response.created",
            "response.output_item.added",
            "response.output_item.done",
            "response.completed"
        ]
    );
    assert!(body.contains(r#""name":"shell_command""#), "{body}");
    assert!(body.contains(r#"\"command\":\"ls -l\""#), "{body}");
    let (_, body) = post(&server, "/v1/responses", &main_request(false));
    let whole: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(whole["status"], "completed");
    assert_eq!(whole["output"][0]["content"][0]["text"], "fine");
    assert_eq!(whole["usage"]["output_tokens"], spex_modelserver::USAGE_OUTPUT_TOKENS);
}
