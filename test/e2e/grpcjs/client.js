'use strict';
// A grpc-js proxyless xDS client driven over stdio by the Go end-to-end
// tests.
//
//   GRPC_XDS_BOOTSTRAP_CONFIG='{...}' node client.js xds:///chat
//
// Each stdin line is a JSON command
//   {"calls": [["k1", "v1", ...], [], ...], "deadline_ms": 10000, "concurrency": 32}
// that sends one UnaryCall per entry of calls, carrying that entry's
// metadata pairs, with waitForReady. Its answer is one stdout line
//   {"ids": ["replica-0", ""], "errors": ["", "DEADLINE_EXCEEDED: ..."]}
// in the order of calls. Logs go to stderr only. The process holds a
// single channel, so independent clients are independent processes; it
// exits when stdin closes.

const path = require('path');
const readline = require('readline');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
require('@grpc/grpc-js-xds').register();

const target = process.argv[2];
if (!target) {
  console.error('usage: node client.js TARGET [RING_SIZE_CAP]');
  process.exit(2);
}
// A raised ring hash cap, as an operator would set it on the channel.
const options = {};
if (process.argv[3]) {
  options['grpc.lb.ring_hash.ring_size_cap'] = Number(process.argv[3]);
}

const def = protoLoader.loadSync(path.join(__dirname, 'test.proto'), { keepCase: true });
const { TestService } = grpc.loadPackageDefinition(def).grpc.testing;
const client = new TestService(target, grpc.credentials.createInsecure(), options);

function unary(pairs, deadlineMs) {
  // Bad metadata throws inside the executor and becomes this call's error.
  return new Promise((resolve) => {
    const md = new grpc.Metadata();
    for (let i = 0; i + 1 < pairs.length; i += 2) {
      const key = String(pairs[i]).toLowerCase();
      md.add(key, key.endsWith('-bin') ? Buffer.from(String(pairs[i + 1])) : String(pairs[i + 1]));
    }
    client.UnaryCall({}, md, { deadline: Date.now() + deadlineMs, waitForReady: true }, (err, resp) => {
      if (err) {
        resolve({ id: '', error: `${grpc.status[err.code] ?? 'UNKNOWN'}: ${err.details ?? err.message}` });
      } else {
        resolve({ id: resp.server_id, error: '' });
      }
    });
  }).catch((e) => ({ id: '', error: `INTERNAL: ${e.message ?? e}` }));
}

async function run(cmd) {
  const calls = Array.isArray(cmd.calls) ? cmd.calls : [];
  const deadlineMs = cmd.deadline_ms > 0 ? cmd.deadline_ms : 10000;
  const concurrency = Math.max(1, cmd.concurrency > 0 ? cmd.concurrency : 32);
  const ids = new Array(calls.length).fill('');
  const errors = new Array(calls.length).fill('');
  let next = 0;
  async function worker() {
    while (next < calls.length) {
      const i = next++;
      const r = await unary(calls[i] ?? [], deadlineMs);
      ids[i] = r.id;
      errors[i] = r.error;
    }
  }
  await Promise.all(Array.from({ length: Math.min(concurrency, calls.length) }, worker));
  return { ids, errors };
}

// Commands run one after another, answered in the order they came.
let chain = Promise.resolve();
const rl = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
rl.on('line', (line) => {
  if (line.trim() === '') {
    return;
  }
  chain = chain.then(async () => {
    let out;
    try {
      out = await run(JSON.parse(line));
    } catch (e) {
      out = { ids: [], errors: [], fatal: String(e && e.stack ? e.stack : e) };
    }
    process.stdout.write(JSON.stringify(out) + '\n');
  });
});
rl.on('close', () => {
  chain.then(() => {
    client.close();
    // The xDS client keeps timers and a stream of its own: exit once
    // stdout has drained rather than wait for them.
    process.stdout.write('', () => process.exit(0));
  });
});
