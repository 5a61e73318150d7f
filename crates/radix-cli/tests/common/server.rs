//! A `radix serve` process (the release build) on a free loopback port, and
//! a plain HTTP/1.1 client over `TcpStream` (so that tests can send
//! malformed bodies, read server-sent events as they come and hang up
//! mid-stream).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A running server, killed when dropped; its [`Client`] is at hand
/// through `Deref`.
pub struct Server {
    child: Child,
    client: Client,
}

/// Requests to a server.
pub struct Client {
    /// `127.0.0.1:PORT`.
    pub addr: String,
}

impl std::ops::Deref for Server {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

/// An answer: status, headers (names lowercase) and body.
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Answer {
    /// The value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {}", self.body))
    }
}

impl Server {
    /// Starts `radix serve --port 0 ARGS` and waits until it listens.
    pub fn start(args: &[&str]) -> Server {
        Server::spawn(&mut Server::command(args))
    }

    /// The command of `radix serve --port 0 ARGS` (release build), to add
    /// to before [`Server::spawn`].
    pub fn command(args: &[&str]) -> Command {
        let mut cmd = super::radix_release();
        cmd.args(["serve", "--port", "0"]).args(args);
        cmd
    }

    /// Starts `cmd` (from [`Server::command`]) and waits until it listens.
    pub fn spawn(cmd: &mut Command) -> Server {
        let mut child = cmd
            .stdout(Stdio::piped())
            .spawn()
            .expect("start radix serve");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped stdout");
        BufReader::new(stdout).read_line(&mut line).unwrap();
        let addr = line
            .trim()
            .strip_prefix("radix serve: listening on http://")
            .unwrap_or_else(|| panic!("radix serve did not start: {line:?}"))
            .to_string();
        Server {
            child,
            client: Client { addr },
        }
    }

    /// A handle on the server at `addr` for another thread (it kills
    /// nothing when dropped).
    pub fn attach(addr: &str) -> Client {
        Client {
            addr: addr.to_string(),
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        let kill = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(kill.success());
    }

    /// The resident memory of the process, in bytes.
    pub fn rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().strip_suffix(" kB"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|kb| kb << 10)
            .expect("VmRSS in /proc/PID/status")
    }

    /// Waits up to `limit` for the process to exit: its exit code.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let t = std::time::Instant::now();
        while t.elapsed() < limit {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Client {
    /// Sends a request and reads the whole answer.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Answer {
        let mut s = self.send(method, path, headers, body);
        let mut raw = vec![];
        s.read_to_end(&mut raw).unwrap();
        parse_answer(&raw)
    }

    /// Sends a request's head declaring a body of `len` bytes, and no body:
    /// the answer the server gives without reading one.
    pub fn request_without_body(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        len: u64,
    ) -> Answer {
        let mut s = TcpStream::connect(&self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {len}\r\n",
            self.addr
        );
        for (n, v) in headers {
            head.push_str(&format!("{n}: {v}\r\n"));
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes()).unwrap();
        let mut raw = vec![];
        s.read_to_end(&mut raw).unwrap();
        parse_answer(&raw)
    }

    /// `POST path` of JSON `body`.
    pub fn post(&self, path: &str, body: &str) -> Answer {
        self.request("POST", path, &[], body)
    }

    /// `GET path`.
    pub fn get(&self, path: &str) -> Answer {
        self.request("GET", path, &[], "")
    }

    /// Sends a request and returns the connection, to read the answer as it
    /// comes (or hang up).
    pub fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> TcpStream {
        let mut s = TcpStream::connect(&self.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n",
            self.addr,
            body.len()
        );
        for (n, v) in headers {
            head.push_str(&format!("{n}: {v}\r\n"));
        }
        head.push_str("\r\n");
        s.write_all(head.as_bytes()).unwrap();
        s.write_all(body.as_bytes()).unwrap();
        s
    }

    /// The value of the metric line starting with `name` (its first sample).
    pub fn metric(&self, name: &str) -> f64 {
        let m = self.get("/metrics");
        m.body
            .lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {}", m.body))
    }

    /// Polls metric `name` until it is `want` (for up to a minute).
    pub fn wait_metric(&self, name: &str, want: f64) {
        for _ in 0..600 {
            if self.metric(name) == want {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("{name} never became {want}: {}", self.get("/metrics").body);
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads server-sent events from `s` until `data: [DONE]` or `n` events
/// (whichever comes first): the `data:` payloads, `[DONE]` included.
pub fn read_events(s: &mut BufReader<TcpStream>, n: usize) -> Vec<String> {
    let mut out = vec![];
    let mut line = String::new();
    while out.len() < n {
        line.clear();
        if s.read_line(&mut line).unwrap() == 0 {
            break;
        }
        // Chunked framing lines (sizes, blanks) carry no `data:`.
        if let Some(data) = line.trim_end().strip_prefix("data: ") {
            out.push(data.to_string());
            if data == "[DONE]" {
                break;
            }
        }
    }
    out
}

/// Splits a raw answer, undoing chunked transfer encoding.
fn parse_answer(raw: &[u8]) -> Answer {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {text:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Answer {
        status,
        headers,
        body,
    }
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].strip_prefix("\r\n").unwrap_or(&after[n..]);
    }
    out
}
