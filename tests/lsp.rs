//! `kiln lsp` as an editor runs it: a child process spoken to over stdio with JSON-RPC framing
//! (`Content-Length` headers). Every read has a timeout, so a server that hangs fails the test.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

use serde_json::{json, Value};

const URI: &str = "file:///tmp/kiln-lsp-test/mlp.exp";

const BAD: &str = r#"experiment "mlp" {
  data {
    source synthetic(inputs: normal([784]), targets: randint(10), count: 1000)
    batch 64
  }
  model {
    input [784]
    fc1: lineer(256)
    relu
    fc2: linear(10)
  }
  place fc3 on cpu
  optimizer adam(lr: 1e-3)
  train {
    epochs 5
    loss cross_entropy
  }
}
"#;

/// A server process and the messages it has sent.
struct Client {
    child: Child,
    stdin: ChildStdin,
    messages: Receiver<Value>,
    next_id: i64,
}

impl Client {
    fn start() -> Client {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kiln"))
            .arg("lsp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("kiln lsp starts");
        let stdin = child.stdin.take().expect("stdin");
        let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let (tx, messages) = channel();
        std::thread::spawn(move || loop {
            let mut length = None;
            loop {
                let mut line = String::new();
                if stdout.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                if let Some(n) = line.strip_prefix("Content-Length: ") {
                    length = n.parse::<usize>().ok();
                }
            }
            let mut body = vec![0; length.expect("a Content-Length header")];
            if stdout.read_exact(&mut body).is_err() {
                return;
            }
            let value = serde_json::from_slice(&body).expect("a JSON message");
            if tx.send(value).is_err() {
                return;
            }
        });
        let mut client = Client {
            child,
            stdin,
            messages,
            next_id: 0,
        };
        let init = client.request("initialize", json!({"capabilities": {}}));
        assert!(init["result"]["capabilities"]["hoverProvider"] == json!(true));
        client.notify("initialized", json!({}));
        client
    }

    fn send(&mut self, message: Value) {
        let body = message.to_string();
        write!(self.stdin, "Content-Length: {}\r\n\r\n{body}", body.len()).expect("write");
        self.stdin.flush().expect("flush");
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    fn next(&self) -> Value {
        self.messages
            .recv_timeout(Duration::from_secs(10))
            .expect("the server answers within 10 s")
    }

    /// Sends a request and returns its response, skipping notifications.
    fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let message = self.next();
            if message["id"] == json!(id) {
                return message;
            }
        }
    }

    /// The next diagnostics published for version `version`.
    fn diagnostics(&mut self, version: i64) -> Vec<Value> {
        loop {
            let m = self.next();
            if m["method"] == "textDocument/publishDiagnostics" && m["params"]["version"] == version
            {
                return m["params"]["diagnostics"]
                    .as_array()
                    .expect("a list")
                    .clone();
            }
        }
    }

    fn open(&mut self, text: &str) {
        self.open_at(URI, text);
    }

    fn open_at(&mut self, uri: &str, text: &str) {
        let doc = json!({"uri": uri, "languageId": "kiln", "version": 1, "text": text});
        self.notify("textDocument/didOpen", json!({ "textDocument": doc }));
    }

    fn change(&mut self, version: i64, text: &str) {
        self.notify(
            "textDocument/didChange",
            json!({
                "textDocument": {"uri": URI, "version": version},
                "contentChanges": [{"text": text}],
            }),
        );
    }

    fn at(&mut self, method: &str, line: u32, character: u32, extra: Value) -> Value {
        let mut params = json!({
            "textDocument": {"uri": URI},
            "position": {"line": line, "character": character},
        });
        if let (Some(p), Some(e)) = (params.as_object_mut(), extra.as_object()) {
            p.extend(e.clone());
        }
        self.request(method, params)
    }

    /// Shuts the server down and returns its exit code.
    fn exit(mut self) -> Option<i32> {
        let answer = self.request("shutdown", Value::Null);
        assert!(answer.get("error").is_none(), "{answer}");
        self.notify("exit", Value::Null);
        for _ in 0..100 {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        panic!("the server did not exit within 5 s of `exit`");
    }
}

fn range(d: &Value) -> (u64, u64, u64, u64) {
    let r = &d["range"];
    let n = |v: &Value| v.as_u64().expect("a number");
    (
        n(&r["start"]["line"]),
        n(&r["start"]["character"]),
        n(&r["end"]["line"]),
        n(&r["end"]["character"]),
    )
}

#[test]
fn diagnostics_are_published_on_open_and_cleared_by_a_fix() {
    let mut client = Client::start();
    client.open(BAD);
    let diags = client.diagnostics(1);
    let codes: Vec<&str> = diags.iter().filter_map(|d| d["code"].as_str()).collect();
    assert_eq!(codes, ["K0102", "K0114"], "{diags:?}");
    assert_eq!(range(&diags[0]), (7, 9, 7, 15));
    assert_eq!(range(&diags[1]), (11, 8, 11, 11));
    assert_eq!(diags[0]["severity"], 1);
    assert!(diags[0]["message"].as_str().is_some_and(
        |m| m.contains("unknown layer `lineer`") && m.contains("help: did you mean `linear`?")
    ));

    // Each diagnostic's structured fix is a quick fix.
    let actions = client.request(
        "textDocument/codeAction",
        json!({
            "textDocument": {"uri": URI},
            "range": diags[0]["range"],
            "context": {"diagnostics": []},
        }),
    );
    let action = &actions["result"][0];
    assert_eq!(action["kind"], "quickfix", "{actions}");
    let edit = &action["edit"]["changes"][URI][0];
    assert_eq!(edit["newText"], "linear");
    assert_eq!(edit["range"], diags[0]["range"]);

    let fixed = BAD.replace("lineer", "linear").replace("fc3 on", "fc2 on");
    client.change(2, &fixed);
    assert_eq!(client.diagnostics(2), Vec::<Value>::new());

    // Closing the document clears its diagnostics.
    client.change(3, BAD);
    assert_eq!(client.diagnostics(3).len(), 2);
    client.notify(
        "textDocument/didClose",
        json!({"textDocument": {"uri": URI}}),
    );
    loop {
        let m = client.next();
        if m["method"] == "textDocument/publishDiagnostics" && m["params"]["version"].is_null() {
            assert_eq!(m["params"]["diagnostics"], json!([]));
            break;
        }
    }
    assert_eq!(client.exit(), Some(0));
}

#[test]
fn hover_completion_definition_and_rename_answer_from_the_document() {
    let mut client = Client::start();
    let text = BAD.replace("lineer", "linear").replace("fc3 on", "fc2 on");
    client.open(&text);
    assert_eq!(client.diagnostics(1), Vec::<Value>::new());

    // Hover on a layer's name shows its output shape, parameters and device.
    let hover = client.at("textDocument/hover", 7, 5, json!({}));
    let shown = hover["result"]["contents"]["value"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(shown.contains("fc1") && shown.contains("[256]"), "{hover}");
    assert!(shown.contains("200,960 parameters"), "{shown}");
    assert!(shown.contains("on `auto`"), "{shown}");

    // Hover on a keyword shows its documentation.
    let hover = client.at("textDocument/hover", 12, 4, json!({}));
    assert!(hover["result"]["contents"]["value"]
        .as_str()
        .is_some_and(|v| v.contains("optimizer")));

    // Completion at the start of a line in `model` lists layer kinds.
    let with_blank = text.replace("    relu\n", "    relu\n    \n");
    client.change(2, &with_blank);
    let items = client.at("textDocument/completion", 9, 4, json!({}));
    let labels: Vec<&str> = items["result"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|i| i["label"].as_str())
        .collect();
    for kind in ["linear", "conv2d", "relu", "input"] {
        assert!(labels.contains(&kind), "{labels:?}");
    }
    assert!(!labels.contains(&"epochs"), "{labels:?}");

    // After `optimizer `: the optimizers; inside a layer's parentheses: its parameters.
    let items = client.at("textDocument/completion", 13, 12, json!({}));
    assert!(items["result"]
        .as_array()
        .expect("a list")
        .iter()
        .any(|i| i["label"] == "adamw"));
    let items = client.at("textDocument/completion", 10, 16, json!({}));
    assert!(
        items["result"]
            .as_array()
            .expect("a list")
            .iter()
            .any(|i| i["label"] == "bias"),
        "{items}"
    );

    // Definition of `fc2` from its use in `place`.
    client.change(3, &text);
    assert_eq!(client.diagnostics(3), Vec::<Value>::new());
    let def = client.at("textDocument/definition", 11, 9, json!({}));
    let start = &def["result"][0]["range"]["start"];
    assert_eq!(
        (start["line"].clone(), start["character"].clone()),
        (json!(9), json!(4)),
        "{def}"
    );

    // Rename `fc2` at its label: the label and its use.
    let edit = client.at("textDocument/rename", 9, 5, json!({"newName": "head"}));
    let edits = edit["result"]["changes"][URI]
        .as_array()
        .expect("edits")
        .clone();
    assert_eq!(edits.len(), 2, "{edit}");
    assert!(edits.iter().all(|e| e["newText"] == "head"));

    // A request about a document that is not open answers an error; the server goes on.
    let answer = client.request(
        "textDocument/hover",
        json!({"textDocument": {"uri": "file:///nowhere.exp"}, "position": {"line": 0, "character": 0}}),
    );
    assert!(answer.get("error").is_some(), "{answer}");
    let symbols = client.request(
        "textDocument/documentSymbol",
        json!({"textDocument": {"uri": URI}}),
    );
    assert_eq!(
        symbols["result"][0]["name"], "experiment \"mlp\"",
        "{symbols}"
    );
    assert_eq!(client.exit(), Some(0));
}

#[test]
fn formatting_answers_the_canonical_layout_as_one_edit() {
    let mut client = Client::start();
    let messy = "experiment \"f\" {\n  data { source synthetic(inputs: normal([4]),targets: randint(2),count: 8) ; batch 4 }\n  model {\n        input [4]\n    fc: linear(2)   # the head\n  }\n  optimizer sgd(lr: 0.1)\n  train { epochs 1; loss cross_entropy }\n}\n";
    client.open(messy);
    let formatting = |client: &mut Client| {
        client.request(
            "textDocument/formatting",
            json!({"textDocument": {"uri": URI}, "options": {"tabSize": 2, "insertSpaces": true}}),
        )
    };
    let answer = formatting(&mut client);
    let edits = answer["result"].as_array().expect("edits").clone();
    assert_eq!(edits.len(), 1, "{answer}");
    let formatted = edits[0]["newText"].as_str().expect("text").to_string();
    assert_eq!(formatted, kiln::syntax::format(messy).expect("formats"));
    assert!(
        formatted.contains("fc: linear(2)  # the head\n"),
        "{formatted}"
    );
    assert_eq!(
        edits[0]["range"]["start"],
        json!({"line": 0, "character": 0})
    );
    // Formatted text needs no edit.
    client.change(2, &formatted);
    let again = formatting(&mut client);
    assert_eq!(again["result"], json!([]), "{again}");
    assert_eq!(client.exit(), Some(0));
}

#[test]
fn a_syntax_error_is_published_and_hover_keeps_the_last_good_analysis() {
    let mut client = Client::start();
    let text = BAD.replace("lineer", "linear").replace("fc3 on", "fc2 on");
    client.open(&text);
    assert_eq!(client.diagnostics(1), Vec::<Value>::new());
    client.change(2, &text.replace("batch 64", "batch = 64"));
    let diags = client.diagnostics(2);
    assert_eq!(diags.len(), 1, "{diags:?}");
    assert_eq!(diags[0]["code"], "K0001");
    assert_eq!(range(&diags[0]).0, 3);
    let hover = client.at("textDocument/hover", 7, 5, json!({}));
    let shown = hover["result"]["contents"]["value"]
        .as_str()
        .unwrap_or_default();
    assert!(shown.contains("[256]"), "{hover}");
    assert_eq!(client.exit(), Some(0));
}

#[test]
fn a_base_named_by_extends_is_read_from_disk() {
    let dir = std::env::temp_dir().join(format!("kiln-lsp-extends-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    let base = BAD.replace("lineer", "linear").replace("fc3 on", "fc2 on");
    std::fs::write(dir.join("base.exp"), base).expect("base file");
    let child = "extends \"base.exp\"\nexperiment \"child\" {\n  seed 7\n}\n";
    let mut client = Client::start();
    client.open_at(&format!("file://{}/child.exp", dir.display()), child);
    assert_eq!(client.diagnostics(1), Vec::<Value>::new());
    let missing = child.replace("base.exp", "missing.exp");
    client.open_at(&format!("file://{}/other.exp", dir.display()), &missing);
    let diags = client.diagnostics(1);
    assert_eq!(diags.len(), 1, "{diags:?}");
    assert_eq!(diags[0]["code"], "K0122");
    assert_eq!(range(&diags[0]), (0, 8, 0, 21));
    assert_eq!(client.exit(), Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn hover_keeps_the_facts_of_the_layers_that_checked_while_the_file_has_errors() {
    let mut client = Client::start();
    // Never clean: an error in the last layer and a typo in an unrelated setting.
    let text = BAD
        .replace("lineer", "linear")
        .replace("fc3 on", "fc2 on")
        .replace("fc2: linear(10)", "fc2: linear(10, bias: maybe)")
        .replace("optimizer adam", "optimzer adam");
    client.open(&text);
    let diags = client.diagnostics(1);
    assert!(diags.len() >= 2, "{diags:?}");
    let hover = client.at("textDocument/hover", 7, 5, json!({}));
    let shown = hover["result"]["contents"]["value"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(shown.contains("fc1") && shown.contains("[256]"), "{hover}");
    assert!(shown.contains("200,960 parameters"), "{shown}");
    assert_eq!(client.exit(), Some(0));
}

#[test]
fn a_warning_the_experiment_allows_is_not_published() {
    // The editor honours `allow` as `kiln check` does: the checker drops the warning.
    let warned = BAD.replace("lineer", "linear").replace(
        "place fc3 on cpu",
        "device cpu\n  compress {\n    quantize fc2 int8\n  }",
    );
    let mut client = Client::start();
    client.open(&warned);
    let codes = |diags: &[Value]| -> Vec<String> {
        diags
            .iter()
            .filter_map(|d| d["code"].as_str().map(str::to_string))
            .collect()
    };
    assert_eq!(codes(&client.diagnostics(1)), ["K0411"]);
    let allowed = warned.replace(
        "experiment \"mlp\" {\n",
        "experiment \"mlp\" {\n  allow [K0411]\n",
    );
    client.change(2, &allowed);
    assert_eq!(client.diagnostics(2), Vec::<Value>::new());
    assert_eq!(client.exit(), Some(0));
}
