// The benchmark's second client, in Node: HTTP/2 Connect `Run` through our server (Node's
// http2, nghttp2 underneath) and the same upstream consumed directly over HTTP/1.1 (Node's
// http, keep-alive). The Cursor IDE is an Electron (Node) app and the third-party client in
// tests/realclient runs on Bun, so this is closer to what real clients cost than a
// pure-Python HTTP/2 client; both paths use the same runtime, so the difference is the
// server's.
//
//   node bench/node_client.mjs PLAN.json   ->   one JSON line on stdout: {"via": [...], "direct": [...]}
//
// PLAN: {"port": server port, "upstream": base URL or null, "warmup": N,
//        "requests": [hex of one Connect envelope holding a run_request, per turn],
//        "prompts": [the same prompts, for the direct path]}
// Each turn: {first, ended, total, deltas, ok}; times in ms from sending the request.
import http from "node:http";
import http2 from "node:http2";
import { readFileSync } from "node:fs";
import { performance } from "node:perf_hooks";

const plan = JSON.parse(readFileSync(process.argv[2], "utf8"));

function readVarint(buf, pos) {
  let value = 0;
  let shift = 0;
  let byte;
  do {
    byte = buf[pos++];
    value += (byte & 0x7f) * 2 ** shift;
    shift += 7;
  } while (byte & 0x80);
  return [value, pos];
}

// The top-level fields of a protobuf message: enough to tell an AgentServerMessage's kind.
function fields(buf) {
  const out = [];
  let pos = 0;
  while (pos < buf.length) {
    let key;
    [key, pos] = readVarint(buf, pos);
    const number = Math.floor(key / 8);
    const wire = key & 7;
    if (wire === 0) {
      let value;
      [value, pos] = readVarint(buf, pos);
      out.push({ number, value });
    } else if (wire === 2) {
      let length;
      [length, pos] = readVarint(buf, pos);
      out.push({ number, value: buf.subarray(pos, pos + length) });
      pos += length;
    } else if (wire === 1) pos += 8;
    else if (wire === 5) pos += 4;
    else throw new Error(`unexpected wire type ${wire}`);
  }
  return out;
}

function varint(value) {
  const bytes = [];
  while (value > 127) {
    bytes.push((value & 127) | 128);
    value = Math.floor(value / 128);
  }
  bytes.push(value);
  return Buffer.from(bytes);
}

const field = (number, payload) =>
  Buffer.concat([varint(number * 8 + 2), varint(payload.length), payload]);

function envelope(payload) {
  const head = Buffer.alloc(5);
  head.writeUInt32BE(payload.length, 1);
  return Buffer.concat([head, payload]);
}

// AgentClientMessage{kv_client_message(3){id(1), set_blob_result(3) | get_blob_result(2)}}:
// a client keeps the blobs it is given, so it acknowledges them.
function kvReply(id, isSet) {
  const inner = Buffer.concat([varint(8), varint(id), field(isSet ? 3 : 2, Buffer.alloc(0))]);
  return envelope(field(3, inner));
}

function serverTurn(session, requestHex) {
  return new Promise((resolve, reject) => {
    const stream = session.request({
      ":method": "POST",
      ":path": "/agent.v1.AgentService/Run",
      "content-type": "application/connect+proto",
      "connect-protocol-version": "1",
      te: "trailers",
    });
    const t0 = performance.now();
    stream.write(Buffer.from(requestHex, "hex")); // never half-closed, like the real clients
    let pending = Buffer.alloc(0);
    let first = NaN;
    let ended = NaN;
    let deltas = 0;
    let ok = false;
    stream.on("data", (chunk) => {
      const now = performance.now() - t0;
      pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
      while (pending.length >= 5) {
        const length = pending.readUInt32BE(1);
        if (pending.length < 5 + length) break;
        const flags = pending[0];
        const payload = pending.subarray(5, 5 + length);
        pending = pending.subarray(5 + length);
        if (flags & 2) {
          ok = payload.toString() === "{}";
          continue;
        }
        for (const f of fields(payload)) {
          if (f.number === 1) {
            for (const update of fields(f.value)) {
              if (update.number === 1) {
                deltas++;
                if (Number.isNaN(first)) first = now;
              } else if (update.number === 14) ended = now;
            }
          } else if (f.number === 4) {
            let id = 0;
            let isSet = false;
            for (const k of fields(f.value)) {
              if (k.number === 1) id = k.value;
              if (k.number === 3) isSet = true;
            }
            stream.write(kvReply(id, isSet));
          }
        }
      }
    });
    stream.on("end", () => {
      const total = performance.now() - t0;
      stream.close();
      resolve({ first, ended, total, deltas, ok: ok && deltas > 0 });
    });
    stream.on("error", reject);
  });
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });

function directTurn(base, prompt) {
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
    const url = new URL(`${base}/v1/chat/completions`);
    const t0 = performance.now();
    const request = http.request(
      {
        host: url.hostname,
        port: url.port,
        path: url.pathname,
        method: "POST",
        agent,
        headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body) },
      },
      (response) => {
        let text = "";
        let first = NaN;
        let deltas = 0;
        response.setEncoding("utf8");
        response.on("data", (chunk) => {
          const now = performance.now() - t0;
          text += chunk;
          let newline;
          while ((newline = text.indexOf("\n")) >= 0) {
            const line = text.slice(0, newline).replace(/\r$/, "");
            text = text.slice(newline + 1);
            if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
            for (const choice of JSON.parse(line.slice(6)).choices ?? []) {
              if (choice.delta?.content) {
                deltas++;
                if (Number.isNaN(first)) first = now;
              }
            }
          }
        });
        response.on("end", () => {
          const total = performance.now() - t0;
          resolve({ first, ended: total, total, deltas, ok: deltas > 0 });
        });
      },
    );
    request.on("error", reject);
    request.end(body);
  });
}

const session = http2.connect(`http://127.0.0.1:${plan.port}`);
await new Promise((resolve, reject) => {
  session.once("connect", resolve);
  session.once("error", reject);
});
const out = { via: [], direct: [] };
const warmup = plan.warmup ?? 5;
for (let i = 0; i < plan.requests.length; i++) {
  const via = await serverTurn(session, plan.requests[i]); // interleaved: drift hits both
  const direct = plan.upstream ? await directTurn(plan.upstream, plan.prompts[i]) : null;
  if (i >= warmup) {
    out.via.push(via);
    if (direct) out.direct.push(direct);
  }
}
session.close();
agent.destroy();
console.log(JSON.stringify(out));
