//! `spex-modelserver [--addr 127.0.0.1:PORT] [SCRIPT.json]`: the scripted model server on its
//! own, for trying a harness by hand. Prints its URL, then one JSON line per request received
//! (API, path, whether it took a scripted reply, the reply, the texts it carried).
//!
//! The script is `{"anthropic": [REPLY...], "responses": [REPLY...]}`, each reply one of
//! `{"text": "..."}`, `{"shell": "..."}`, `{"tool": {"name": "...", "input": {...}}}`,
//! `{"status": 500}`, `{"delay": {"ms": 100, "then": REPLY}}`, `"drop"`.

use std::time::Duration;

use anyhow::Context as _;
use spex_modelserver::{Api, ModelServer, Script};

fn main() -> anyhow::Result<()> {
    let mut addr = "127.0.0.1:0".to_owned();
    let mut script = Script::default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        if arg == "--addr" {
            addr = args.next().context("--addr needs HOST:PORT")?;
        } else {
            let text = std::fs::read_to_string(&arg).with_context(|| format!("reading {arg}"))?;
            script = serde_json::from_str(&text).with_context(|| format!("parsing {arg}"))?;
        }
    }
    let server = ModelServer::start_on(addr.parse().context("--addr")?)?;
    server.script(Api::Anthropic, script.anthropic);
    server.script(Api::Responses, script.responses);
    println!("{}", server.url());
    let mut shown = 0;
    loop {
        let requests = server.requests();
        for request in &requests[shown..] {
            let line = serde_json::json!({
                "api": format!("{:?}", request.api),
                "path": request.path,
                "main": request.main,
                "reply": format!("{:?}", request.reply),
                "texts": request.texts(),
            });
            println!("{line}");
        }
        shown = requests.len();
        std::thread::sleep(Duration::from_millis(100));
    }
}
