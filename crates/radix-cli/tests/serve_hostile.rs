//! `radix serve` (the release build) driven as a hostile client would:
//! numbers at their limits and random bodies, faults injected into the
//! generation thread (`RADIX_SERVE_FAULT`), idle and half-sent connections
//! under a small open-file limit, oversized embedding requests. Each check
//! has a deadline, and each server answers a normal request afterwards.

mod common;

use std::io::{BufReader, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::server::{Client, Server, read_events};
use serde_json::{Value, json};

const KEY: &str = "sk-test";
const AUTH: (&str, &str) = ("Authorization", "Bearer sk-test");

/// `POST path` with the API key.
fn post(s: &Server, path: &str, body: &Value) -> common::server::Answer {
    s.request("POST", path, &[AUTH], &body.to_string())
}

/// Runs `f` on another thread: its result, or a failure naming `what` if
/// it takes longer than `limit`.
fn within<T: Send + 'static>(
    what: &str,
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit)
        .unwrap_or_else(|_| panic!("{what} took longer than {limit:?}"))
}

/// A greedy completion of 8 tokens: its text, after checking it is 200.
fn normal(s: &Client, path_key: &[(&str, &str)]) -> String {
    let req = json!({
        "model": "smollm2", "prompt": "The capital of France is", "max_tokens": 8,
        "temperature": 0,
    });
    let a = s.request("POST", "/v1/completions", path_key, &req.to_string());
    assert_eq!(a.status, 200, "{}", a.body);
    a.json()["choices"][0]["text"].as_str().unwrap().to_string()
}

/// The limits of a JSON integer read as `u64`, and numbers just past them.
const LIMITS: [&str; 6] = [
    "18446744073709551615",
    "18446744073709551616",
    "-1",
    "-9223372036854775808",
    "1e300",
    "0.5",
];

/// Every integer field at its type's limits answers 400 naming the field
/// (or, for `seed` and `top_k`, whose largest value is meaningful, 200);
/// `max_tokens` = 2^64 - 1 no longer wraps the context check. Then a step
/// error and a panic injected mid-batch fail only the requests of that
/// batch, and ten requests afterwards succeed; random bodies answer 400 or
/// 200, never 500; embeddings are bounded; memory stays within 100 MiB of
/// its plateau.
#[test]
fn no_request_wedges_the_server() {
    let s = Server::spawn(
        Server::command(&["--max-batch", "2", "--context", "256"])
            .env("RADIX_API_KEY", KEY)
            .env("RADIX_SERVE_FAULT", "step-error:77,panic:78"),
    );
    let reference = within("a first request", Duration::from_secs(120), {
        let addr = s.addr.clone();
        move || normal(&Server::attach(&addr), &[AUTH])
    });
    // Two rounds of every scenario: the first compiles what each needs
    // (embedding shapes, a rebuilt batch) and sets the plateau; through the
    // second, memory stays within 100 MiB of it.
    let mut plateau = 0;
    for round in 0..2 {
        let mut rss = vec![("start", s.rss())];
        numbers_at_their_limits(&s);
        assert_eq!(normal(&s, &[AUTH]), reference);
        rss.push(("numbers", s.rss()));
        for fault in [77, 78] {
            a_fault_fails_its_batch_only(&s, fault, &reference);
        }
        rss.push(("faults", s.rss()));
        random_bodies_never_fail_the_server(&s);
        assert_eq!(normal(&s, &[AUTH]), reference);
        rss.push(("random bodies", s.rss()));
        embeddings_are_bounded(&s);
        rss.push(("embeddings", s.rss()));
        let mib: Vec<String> = rss
            .iter()
            .map(|(k, v)| format!("{k} {}", v >> 20))
            .collect();
        eprintln!("RSS (MiB) in round {round}: {}", mib.join(", "));
        if round == 0 {
            plateau = rss.iter().map(|r| r.1).max().unwrap();
        } else {
            let top = rss.iter().map(|r| r.1).max().unwrap();
            assert!(
                top < plateau + (100 << 20),
                "RSS rose to {} MiB past a plateau of {} MiB",
                top >> 20,
                plateau >> 20
            );
        }
    }
    let h = s.get("/health");
    assert_eq!(h.status, 200, "{}", h.body);
}

fn numbers_at_their_limits(s: &Server) {
    let base = json!({"model": "smollm2", "prompt": "hi", "max_tokens": 4, "temperature": 0});
    let t = Instant::now();
    for field in ["max_tokens", "max_completion_tokens", "n", "top_k", "seed"] {
        for limit in LIMITS {
            let mut body = base.to_string();
            body.pop();
            let body = if field == "max_tokens" {
                body.replace("\"max_tokens\":4", &format!("\"max_tokens\":{limit}")) + "}"
            } else {
                format!("{body},\"{field}\":{limit}}}")
            };
            let a = s.request("POST", "/v1/completions", &[AUTH], &body);
            let meaningful = ["top_k", "seed"].contains(&field) && limit == LIMITS[0];
            if meaningful {
                assert_eq!(a.status, 200, "{body}: {}", a.body);
            } else {
                assert_eq!(a.status, 400, "{body}: {}", a.body);
                assert_eq!(a.json()["error"]["param"], field, "{body}: {}", a.body);
            }
        }
    }
    for limit in LIMITS {
        let body = format!(r#"{{"model": "minilm", "input": "hi", "dimensions": {limit}}}"#);
        let a = s.request("POST", "/v1/embeddings", &[AUTH], &body);
        assert_eq!(a.status, 400, "{body}: {}", a.body);
        assert_eq!(a.json()["error"]["param"], "dimensions", "{}", a.body);
    }
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
}

/// Two streams batched together, the second asking for `fault` tokens,
/// which fails the step (or panics the thread) at its first step: both
/// end with an error event, a request queued behind them and the ten after
/// them succeed.
fn a_fault_fails_its_batch_only(s: &Server, fault: u64, reference: &str) {
    let stream = |max_tokens: u64| {
        let req = json!({
            "model": "smollm2", "prompt": "Once upon a time", "max_tokens": max_tokens,
            "temperature": 0, "stream": true,
        });
        BufReader::new(s.send("POST", "/v1/completions", &[AUTH], &req.to_string()))
    };
    let failed = requests(s, "/v1/completions", 500);
    let mut first = stream(240);
    assert_eq!(read_events(&mut first, 1).len(), 1);
    let mut faulty = stream(fault);
    let rest: Vec<Vec<String>> = [&mut first, &mut faulty]
        .into_iter()
        .map(within_read)
        .collect();
    for events in &rest {
        let error = &events[events.len() - 2];
        assert!(error.contains("\"error\""), "{events:?}");
        assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    }
    s.wait_metric("radix_active_slots", 0.0);
    for _ in 0..10 {
        assert_eq!(normal(s, &[AUTH]), reference);
    }
    // Each failed stream counts as a 500 when it ends.
    let t = Instant::now();
    while requests(s, "/v1/completions", 500) < failed + 2.0 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "{}",
            s.get("/metrics").body
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(s.get("/health").status, 200);
}

/// The count of answers of `status` on `route` in `/metrics`.
fn requests(s: &Client, route: &str, status: u16) -> f64 {
    let line = format!("radix_requests_total{{route=\"{route}\",status=\"{status}\"}} ");
    s.get("/metrics")
        .body
        .lines()
        .find_map(|l| l.strip_prefix(line.as_str()))
        .map_or(0.0, |n| n.parse().unwrap())
}

/// Every event of a stream, within a minute.
fn within_read(r: &mut BufReader<TcpStream>) -> Vec<String> {
    r.get_ref()
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    read_events(r, usize::MAX)
}

/// 300 bodies built from a fixed seed: fields of both endpoints with values
/// at the limits of their types and of the wrong types. Each answers 200
/// or 400 in time; the server answers normally afterwards.
fn random_bodies_never_fail_the_server(s: &Server) {
    let fields: [(&str, &[&str]); 9] = [
        (
            "max_tokens",
            &[
                "0",
                "1",
                "3",
                "18446744073709551615",
                "-1",
                "1e999",
                "\"3\"",
                "[]",
            ],
        ),
        (
            "temperature",
            &["0", "1e308", "-0.0", "1e-320", "\"hot\"", "null"],
        ),
        ("top_p", &["0", "1", "1e-320", "2", "-1e308"]),
        ("top_k", &["0", "1", "18446744073709551615", "4294967296"]),
        ("seed", &["0", "18446744073709551615", "-5"]),
        (
            "stop",
            &[
                "\"\"",
                "[\"a\",\"b\",\"c\",\"d\",\"e\"]",
                "[]",
                "[\"\"]",
                "7",
            ],
        ),
        ("n", &["1", "0", "18446744073709551615"]),
        ("stream", &["false", "0"]),
        ("presence_penalty", &["0", "1e308", "-1e308"]),
    ];
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as usize
    };
    let t = Instant::now();
    for i in 0..300 {
        let mut parts = vec![
            "\"model\":\"smollm2\"".to_string(),
            if i % 2 == 0 {
                "\"prompt\":\"hi\"".to_string()
            } else {
                "\"prompt\":[\"a\",\"b\"]".to_string()
            },
        ];
        let mut has_max = false;
        for (name, values) in fields {
            if next(3) == 0 || name == "max_tokens" {
                parts.push(format!("\"{name}\":{}", values[next(values.len())]));
                has_max |= name == "max_tokens";
            }
        }
        assert!(has_max);
        let body = format!("{{{}}}", parts.join(","));
        let a = s.request("POST", "/v1/completions", &[AUTH], &body);
        assert!(
            [200, 400].contains(&a.status),
            "{body}: {} {}",
            a.status,
            a.body
        );
    }
    assert!(t.elapsed() < Duration::from_secs(120), "{:?}", t.elapsed());
}

fn embeddings_are_bounded(s: &Server) {
    // 80,000 empty strings (320 KB): refused before any work.
    let body = json!({"model": "minilm", "input": vec![""; 80_000]}).to_string();
    let t = Instant::now();
    let a = s.request("POST", "/v1/embeddings", &[AUTH], &body);
    assert_eq!(a.status, 400, "{}", a.body);
    assert_eq!(a.json()["error"]["param"], "input");
    assert!(t.elapsed() < Duration::from_secs(1), "{:?}", t.elapsed());
    // A text longer than the model reads is refused, or truncated if asked.
    let long = "word ".repeat(400);
    let a = post(
        s,
        "/v1/embeddings",
        &json!({"model": "minilm", "input": ["hi", long]}),
    );
    assert_eq!(a.status, 400, "{}", a.body);
    assert_eq!(a.json()["error"]["param"], "input[1]", "{}", a.body);
    let a = post(
        s,
        "/v1/embeddings",
        &json!({"model": "minilm", "input": ["hi", long], "truncate": true}),
    );
    assert_eq!(a.status, 200, "{}", a.body);
    let a = a.json();
    assert_eq!(a["usage"]["prompt_tokens"], 3 + 256);
    assert_eq!(a["data"][1]["embedding"].as_array().unwrap().len(), 384);
    // 2,048 inputs are taken; a client that hangs up has its work stopped.
    let body = json!({"model": "minilm", "input": vec!["a sentence of a few words"; 2048]});
    let c = s.send("POST", "/v1/embeddings", &[AUTH], &body.to_string());
    std::thread::sleep(Duration::from_millis(200));
    c.shutdown(std::net::Shutdown::Both).unwrap();
    drop(c);
    let t = Instant::now();
    let a = post(
        s,
        "/v1/embeddings",
        &json!({"model": "minilm", "input": "hi"}),
    );
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
}

/// A stuck generation thread turns `/health` to 503 and requests time out
/// (`--request-timeout`); a dead one turns it to 503 and requests are
/// refused at once.
#[test]
fn a_stuck_or_dead_worker_shows_in_health() {
    for (fault, stuck) in [("hang:33", true), ("exit:33", false)] {
        let s = Server::spawn(
            Server::command(&[
                "--embed-model",
                "none",
                "--context",
                "64",
                "--health-timeout",
                "1",
                "--request-timeout",
                "3",
            ])
            .env("RADIX_SERVE_FAULT", fault),
        );
        assert_eq!(s.get("/health").status, 200);
        let req = json!({"model": "smollm2", "prompt": "hi", "max_tokens": 33, "temperature": 0});
        let t = Instant::now();
        let a = s.post("/v1/completions", &req.to_string());
        if stuck {
            assert_eq!(a.status, 504, "{}", a.body);
            assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        } else {
            assert_eq!(a.status, 500, "{}", a.body);
        }
        let t = Instant::now();
        loop {
            let h = s.get("/health");
            if h.status == 503 {
                eprintln!("{fault}: {}", h.body);
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(5), "{fault}: {}", h.body);
            std::thread::sleep(Duration::from_millis(100));
        }
        if !stuck {
            let req = json!({"model": "smollm2", "prompt": "hi", "max_tokens": 2});
            let a = s.post("/v1/completions", &req.to_string());
            assert_eq!(a.status, 503, "{}", a.body);
        }
    }
}

/// Sets the open-file limit (soft and hard) of the child to `n`.
fn limit_open_files(cmd: &mut std::process::Command, n: u64) {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: setrlimit is async-signal-safe; the closure touches nothing
    // else.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: n,
                rlim_max: n,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Under a 256-descriptor limit, 300 idle connections leave the server
/// reachable (the cap and the read timeout); a connection that sent half
/// its headers does not hold a SIGTERM exit past 5 s; a declared body of
/// 10 GB is 413 at once.
#[test]
fn sockets_cannot_wedge_the_server() {
    let mut cmd = Server::command(&[
        "--embed-model",
        "none",
        "--context",
        "64",
        "--read-timeout",
        "2",
        "--shutdown-timeout",
        "60",
    ]);
    limit_open_files(&mut cmd, 256);
    let mut s = Server::spawn(&mut cmd);
    let idle: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect(&s.addr).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    let addr = s.addr.clone();
    let h = within(
        "a request behind 300 idle sockets",
        Duration::from_secs(5),
        move || Server::attach(&addr).get("/health"),
    );
    assert_eq!(h.status, 200, "{}", h.body);
    eprintln!("answered behind 300 idle sockets in {:?}", t.elapsed());
    drop(idle);

    let mut c = TcpStream::connect(&s.addr).unwrap();
    c.write_all(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000000\r\n\r\n")
        .unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut head = [0; 12];
    c.read_exact(&mut head).unwrap();
    assert_eq!(&head, b"HTTP/1.1 413");
    drop(c);

    let mut half = TcpStream::connect(&s.addr).unwrap();
    half.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    s.terminate();
    assert_eq!(s.wait_exit(Duration::from_secs(5)), Some(0));
    eprintln!(
        "exited {:?} after SIGTERM with a half-sent request open",
        t.elapsed()
    );
    drop(half);
}
