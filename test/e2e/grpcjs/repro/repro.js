'use strict';
// Dials xds:///chat served by `go run . -port PORT` (main.go in this
// directory) and shows whether keyed (ring_hash) calls stall, or, with
// --two-rings, whether the client survives an update of two ring_hash
// clusters.
//
//   node repro.js [--xds 18000] [--channels 1] [--keyless 12] [--keyed 6]
//                 [--deadline 3000] [--local-pool]
//   node repro.js --two-rings [--xds 18000] [--seconds 8]
//
// For each channel in turn: --keyless calls without x-session-id, a pause,
// then --keyed calls with x-session-id session-0, session-1, ..., one at a
// time. With --two-rings: for --seconds, one call at a time, every other
// one with x-tenant-id: b, each with its own x-session-id. Exits 1 if any
// call failed.

const path = require('path');
const { parseArgs } = require('util');

const { values: args } = parseArgs({
  options: {
    xds: { type: 'string', default: '18000' },
    channels: { type: 'string', default: '1' },
    keyless: { type: 'string', default: '12' },
    keyed: { type: 'string', default: '6' },
    deadline: { type: 'string', default: '3000' },
    'local-pool': { type: 'boolean', default: false },
    'two-rings': { type: 'boolean', default: false },
    seconds: { type: 'string', default: '8' },
  },
});

process.env.GRPC_XDS_BOOTSTRAP_CONFIG = JSON.stringify({
  xds_servers: [{ server_uri: `127.0.0.1:${args.xds}`, channel_creds: [{ type: 'insecure' }], server_features: ['xds_v3'] }],
  node: { id: 'grpcjs-repro', locality: {} },
});

// From test/e2e/grpcjs/node_modules.
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
require('@grpc/grpc-js-xds').register();

const def = protoLoader.loadSync(path.join(__dirname, '..', 'test.proto'), { keepCase: true });
const { TestService } = grpc.loadPackageDefinition(def).grpc.testing;

function call(client, session, tenant) {
  const md = new grpc.Metadata();
  if (session !== undefined) {
    md.set('x-session-id', session);
  }
  if (tenant !== undefined) {
    md.set('x-tenant-id', tenant);
  }
  const start = Date.now();
  return new Promise((resolve) => {
    client.UnaryCall({}, md, { deadline: start + Number(args.deadline), waitForReady: true }, (err, resp) => {
      const ms = Date.now() - start;
      resolve(err ? { ok: false, ms, what: `${grpc.status[err.code]}: ${err.details}` } : { ok: true, ms, what: resp.server_id });
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// twoRings calls for --seconds, alternating the two clusters, and reports
// where the calls landed each second.
async function twoRings() {
  const client = new TestService('xds:///chat', grpc.credentials.createInsecure());
  const end = Date.now() + 1000 * Number(args.seconds);
  let failed = 0;
  for (let i = 0, second = 0, seen = {}; Date.now() < end; i++) {
    const tenant = i % 2 ? 'b' : undefined;
    const r = await call(client, `session-${i}`, tenant);
    if (!r.ok) {
      failed++;
      console.log(`call ${i} (tenant ${tenant ?? '-'}): ${r.what} after ${r.ms} ms`);
    } else {
      const k = `${tenant ?? '-'}→${r.what}`;
      seen[k] = (seen[k] ?? 0) + 1;
    }
    const s = Math.floor((end - Date.now()) / 1000);
    if (s !== second) {
      console.log(`${new Date().toISOString()} ${JSON.stringify(seen)}`);
      second = s;
      seen = {};
    }
    await sleep(20);
  }
  console.log(failed === 0 ? 'no call failed; the client is alive' : `${failed} calls failed`);
  process.exit(failed === 0 ? 0 : 1);
}

async function main() {
  if (args['two-rings']) {
    return twoRings();
  }
  const options = args['local-pool'] ? { 'grpc.use_local_subchannel_pool': 1 } : {};
  console.log(`grpc-js ${require('@grpc/grpc-js/package.json').version}, ` +
    `grpc-js-xds ${require('@grpc/grpc-js-xds/package.json').version}, node ${process.version}; ` +
    `channels=${args.channels} options=${JSON.stringify(options)}`);
  let failed = 0;
  for (let c = 0; c < Number(args.channels); c++) {
    const client = new TestService('xds:///chat', grpc.credentials.createInsecure(), options);
    const seen = {};
    for (let i = 0; i < Number(args.keyless); i++) {
      const r = await call(client);
      if (!r.ok) {
        failed++;
        console.log(`channel ${c} keyless call ${i}: ${r.what} after ${r.ms} ms`);
      } else {
        seen[r.what] = (seen[r.what] ?? 0) + 1;
      }
    }
    if (Number(args.keyless) > 0) {
      console.log(`channel ${c} keyless calls: ${JSON.stringify(seen)}`);
    }
    await sleep(500); // every connection the keyless calls started is READY by now
    for (let i = 0; i < Number(args.keyed); i++) {
      const r = await call(client, `session-${i}`);
      if (!r.ok) {
        failed++;
      }
      console.log(`channel ${c} keyed call session-${i}: ${r.ok ? 'OK ' + r.what : r.what} after ${r.ms} ms`);
    }
  }
  console.log(failed === 0 ? 'no call failed' : `${failed} calls failed`);
  process.exit(failed === 0 ? 0 : 1);
}

main();
