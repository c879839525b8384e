// The Node client of bench/relay_overhead.py's text check and bench/relay_concurrency.py:
// HTTP/2 Connect `Run` (Node's http2, nghttp2) and, for reference, the same prompts straight
// to the upstream over HTTP/1.1 (Node's http). bench/node_client.mjs times sequential turns;
// this one keeps what those two need instead: each run's text, or every text delta's arrival.
//
//   node bench/node_relay_client.mjs PLAN.json   ->   one JSON line on stdout
//
// PLAN: {"mode": "text" | "concurrent", "port": server port, "upstream": base URL or null,
//        "requests": [hex of one Connect envelope holding a run_request, per run],
//        "prompts": [the same prompts, for the direct path], "connections": C}
// text:       the runs one after the other, each through the server then direct:
//             {"via": [{ok, text}], "direct": [{ok, text}]}
// concurrent: every request at once over C HTTP/2 connections, then (with "upstream") every
//             prompt at once straight to the upstream, one keep-alive socket per run:
//             {"via": [run], "wall": ms, "direct": [run], "wallDirect": ms},
//             run = {first, total, ok, gaps, error?}: ms from its request to its first text
//             delta and to its end, the ms between its consecutive text deltas, and why it
//             failed if it did.
import http from "node:http";
import http2 from "node:http2";
import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";

const plan = JSON.parse(readFileSync(process.argv[2], "utf8"));

function varintAt(buf, pos) {
  let value = 0;
  let scale = 1;
  for (;;) {
    const byte = buf[pos++];
    value += (byte & 0x7f) * scale;
    if (!(byte & 0x80)) return [value, pos];
    scale *= 128;
  }
}

// Top-level fields of a protobuf message as [number, value]: a number for varints, a
// Buffer for length-delimited fields; fixed-width fields are skipped.
function protoFields(buf) {
  const found = [];
  let pos = 0;
  while (pos < buf.length) {
    let tag;
    [tag, pos] = varintAt(buf, pos);
    const kind = tag & 7;
    const number = (tag - kind) / 8;
    if (kind === 0) {
      let value;
      [value, pos] = varintAt(buf, pos);
      found.push([number, value]);
    } else if (kind === 2) {
      let size;
      [size, pos] = varintAt(buf, pos);
      found.push([number, buf.subarray(pos, pos + size)]);
      pos += size;
    } else if (kind === 1) pos += 8;
    else if (kind === 5) pos += 4;
    else throw new Error(`wire type ${kind}`);
  }
  return found;
}

function toVarint(value) {
  const out = [];
  while (value >= 128) {
    out.push((value % 128) | 128);
    value = Math.floor(value / 128);
  }
  out.push(value);
  return Buffer.from(out);
}

const lengthDelimited = (number, bytes) =>
  Buffer.concat([toVarint(number * 8 + 2), toVarint(bytes.length), bytes]);

function connectFrame(payload) {
  const frame = Buffer.alloc(5 + payload.length);
  frame.writeUInt32BE(payload.length, 1);
  payload.copy(frame, 5);
  return frame;
}

// A server that stores blobs with the client (our server's checkpoint) waits for the answer:
// AgentClientMessage{kv_client_message(3){id(1), set_blob_result(3) | get_blob_result(2)}}.
function blobAnswer(id, wasSet) {
  const result = lengthDelimited(wasSet ? 3 : 2, Buffer.alloc(0));
  const body = Buffer.concat([toVarint(8), toVarint(id), result]);
  return connectFrame(lengthDelimited(3, body));
}

// One Run: resolves {first, total, ok, times, text} (times: each text delta's arrival, ms).
function run(session, requestHex, keepText) {
  return new Promise((resolve, reject) => {
    const stream = session.request({
      ":method": "POST",
      ":path": "/agent.v1.AgentService/Run",
      "content-type": "application/connect+proto",
      "connect-protocol-version": "1",
      te: "trailers",
    });
    const start = performance.now();
    stream.write(Buffer.from(requestHex, "hex")); // not half-closed: real clients keep it open
    let buffered = Buffer.alloc(0);
    let ended = false;
    const times = [];
    const pieces = [];
    stream.on("data", (chunk) => {
      const at = performance.now() - start;
      buffered = buffered.length ? Buffer.concat([buffered, chunk]) : chunk;
      while (buffered.length >= 5) {
        const size = buffered.readUInt32BE(1);
        if (buffered.length < 5 + size) break;
        const flags = buffered[0];
        const message = buffered.subarray(5, 5 + size);
        buffered = buffered.subarray(5 + size);
        if (flags & 2) {
          ended = message.toString() === "{}";
          continue;
        }
        for (const [number, value] of protoFields(message)) {
          if (number === 1) {
            // interaction_update: text_delta(1){text(1)}
            for (const [kind, update] of protoFields(value)) {
              if (kind !== 1) continue;
              times.push(at);
              if (keepText) for (const [n, t] of protoFields(update)) if (n === 1) pieces.push(t);
            }
          } else if (number === 4) {
            // kv_server_message{id(1), get_blob_args(2) | set_blob_args(3)}
            let id = 0;
            let wasSet = false;
            for (const [n, v] of protoFields(value)) {
              if (n === 1) id = v;
              else if (n === 3) wasSet = true;
            }
            stream.write(blobAnswer(id, wasSet));
          }
        }
      }
    });
    stream.on("end", () => {
      const total = performance.now() - start;
      stream.close();
      const text = keepText ? Buffer.concat(pieces).toString("utf8") : undefined;
      const first = times.length ? times[0] : NaN;
      resolve({ first, total, ok: ended && times.length > 0, times, text });
    });
    stream.on("error", reject);
  });
}

// The same prompt straight to the upstream: resolves {first, total, ok, times, text}.
function direct(prompt, through, keepText) {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({
      model: "brain-1",
      stream: true,
      stream_options: { include_usage: true },
      messages: [
        { role: "system", content: "You are a coding agent." },
        { role: "user", content: prompt },
      ],
    });
    const url = new URL(`${plan.upstream}/v1/chat/completions`);
    const start = performance.now();
    const request = http.request(
      {
        host: url.hostname,
        port: url.port,
        path: url.pathname,
        method: "POST",
        agent: through,
        headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body) },
      },
      (response) => {
        let rest = "";
        let text = "";
        const times = [];
        response.setEncoding("utf8");
        response.on("data", (chunk) => {
          const at = performance.now() - start;
          rest += chunk;
          let cut;
          while ((cut = rest.indexOf("\n")) >= 0) {
            const line = rest.slice(0, cut).replace(/\r$/, "");
            rest = rest.slice(cut + 1);
            if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
            for (const choice of JSON.parse(line.slice(6)).choices ?? []) {
              const content = choice.delta?.content;
              if (!content) continue;
              times.push(at);
              if (keepText) text += content;
            }
          }
        });
        response.on("end", () => {
          const total = performance.now() - start;
          const first = times.length ? times[0] : NaN;
          resolve({ first, total, ok: times.length > 0, times, text: keepText ? text : undefined });
        });
      },
    );
    request.on("error", reject);
    request.end(body);
  });
}

async function open() {
  const session = http2.connect(`http://127.0.0.1:${plan.port}`);
  // Until the server's SETTINGS arrive Node assumes 100 concurrent streams: wait for them.
  const settings = new Promise((resolve) => session.once("remoteSettings", resolve));
  await new Promise((resolve, reject) => {
    session.once("connect", resolve);
    session.once("error", reject);
  });
  await Promise.race([settings, new Promise((resolve) => setTimeout(resolve, 1000).unref())]);
  return session;
}

function asRun(result) {
  const gaps = [];
  for (let i = 1; i < result.times.length; i++) {
    gaps.push(Math.round((result.times[i] - result.times[i - 1]) * 1000) / 1000);
  }
  const summary = { first: result.first, total: result.total, ok: result.ok, gaps };
  if (result.error) summary.error = result.error;
  return summary;
}

const lost = (error) => ({ first: NaN, total: NaN, ok: false, times: [], error: String(error) });

async function textMode() {
  const session = await open();
  const single = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const out = { via: [], direct: [] };
  for (let i = 0; i < plan.requests.length; i++) {
    const via = await run(session, plan.requests[i], true);
    out.via.push({ ok: via.ok, text: via.text });
    if (plan.upstream) {
      const straight = await direct(plan.prompts[i], single, true);
      out.direct.push({ ok: straight.ok, text: straight.text });
    }
  }
  session.close();
  single.destroy();
  return out;
}

async function concurrentMode() {
  const sessions = [];
  const count = plan.requests.length ? (plan.connections ?? 10) : 0;
  for (let i = 0; i < count; i++) sessions.push(await open());
  let start = performance.now();
  const via = await Promise.all(
    plan.requests.map((r, i) => run(sessions[i % sessions.length], r, false).catch(lost)),
  );
  const out = { via: via.map(asRun), wall: performance.now() - start };
  for (const session of sessions) session.close();
  if (plan.upstream) {
    const many = new http.Agent({ keepAlive: true, maxSockets: Infinity });
    start = performance.now();
    const straight = await Promise.all(plan.prompts.map((p) => direct(p, many, false).catch(lost)));
    out.direct = straight.map(asRun);
    out.wallDirect = performance.now() - start;
    many.destroy();
  }
  return out;
}

const result = await (plan.mode === "text" ? textMode() : concurrentMode());
console.log(JSON.stringify(result));
