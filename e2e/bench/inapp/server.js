// The bench's in-app comparison (docs/performance.md, "Against in-app
// middleware"): one tiny Express handler, POST /v1/orders, run bare (as
// idemgate's upstream) or behind one of two published idempotency
// middlewares on the bench's Valkey, wired the way each package's README
// shows.
//
//   node server.js --mode none|express-idempotency|node-idempotency \
//     --port PORT [--valkey HOST:PORT] --counts FILE
//
// The handler counts its executions per Idempotency-Key: in memory for
// GET /count?key=K and one line per execution appended to FILE before it
// answers, so a count survives a SIGKILL of this process (a restart reads
// FILE back). X-Delay-Ms: N makes it answer N ms after it ran, so a call
// can be in flight when the process is killed. Its first stdout line is
// the address it listens on, once the middleware's store is connected.
'use strict';

const fs = require('fs');
const express = require('express');

function flags(argv) {
  const out = { mode: 'none', port: '0', valkey: '', counts: '' };
  for (let i = 2; i < argv.length; i += 2) {
    const name = argv[i].replace(/^--/, '');
    if (!(name in out) || i + 1 >= argv.length) {
      throw new Error(`usage: server.js --mode M --port P --valkey H:P --counts FILE (bad flag ${argv[i]})`);
    }
    out[name] = argv[i + 1];
  }
  if (!out.counts) throw new Error('--counts FILE is required');
  return out;
}

const opts = flags(process.argv);

// Executions per key: rebuilt from the file the killed predecessor left.
const counts = new Map();
let total = 0;
if (fs.existsSync(opts.counts)) {
  for (const key of fs.readFileSync(opts.counts, 'utf8').split('\n')) {
    if (key === '') continue;
    counts.set(key, (counts.get(key) || 0) + 1);
    total++;
  }
}
const countsFD = fs.openSync(opts.counts, 'a');

// handler is the business logic every shape runs: it "creates an order"
// (the side effect a retry must not repeat), then answers 201.
function handler(req, res) {
  const key = req.get('idempotency-key') || '';
  counts.set(key, (counts.get(key) || 0) + 1);
  total++;
  // Written before the answer and before any delay: the execution is on
  // disk (the page cache survives the process) even if it is killed now.
  fs.writeSync(countsFD, key + '\n');
  const body = { id: 'ord_' + total, status: 'created' };
  const delay = Number(req.get('x-delay-ms') || 0);
  if (delay > 0) {
    setTimeout(() => res.status(201).json(body), delay);
  } else {
    res.status(201).json(body);
  }
}

// expressIdempotency wires express-idempotency with its Redis adapter as
// both READMEs show: the adapter connected at start, the middleware in
// front of the route, and the handler returning early on a hit (the
// middleware calls next() after it has sent a replay).
async function expressIdempotency(app) {
  const idempotency = require('express-idempotency');
  const RedisAdapter = require('express-idempotency-redis-adapter').default;
  const adapter = new RedisAdapter({ connectionConfig: { url: 'redis://' + opts.valkey } });
  await adapter.connect();
  app.post('/v1/orders', express.json(), idempotency.idempotency({ dataAdapter: adapter }), (req, res) => {
    if (idempotency.getSharedIdempotencyService().isHit(req)) return;
    handler(req, res);
  });
}

// nodeIdempotency wraps @node-idempotency/core with its Redis storage
// adapter the way its README shows (onRequest before the handler,
// onResponse with the handler's answer): the README names an Express
// package, @node-idempotency/express, that is not on the registry. Errors
// map to statuses and headers as the package's own NestJS interceptor
// maps them (@node-idempotency/shared: fingerprint mismatch 422, in
// progress 409 with Retry-After: 1, key too long 400), and, as there, the
// answer is sent once onResponse has stored it.
async function nodeIdempotency(app) {
  const { Idempotency, IdempotencyError, IdempotencyErrorCodes } = require('@node-idempotency/core');
  const { RedisStorageAdapter } = require('@node-idempotency/storage-adapter-redis');
  const storage = new RedisStorageAdapter({ url: 'redis://' + opts.valkey });
  await storage.connect();
  const idem = new Idempotency(storage);
  const statuses = {
    [IdempotencyErrorCodes.IDEMPOTENCY_FINGERPRINT_MISSMATCH]: 422,
    [IdempotencyErrorCodes.IDEMPOTENCY_KEY_LEN_EXEEDED]: 400,
    [IdempotencyErrorCodes.IDEMPOTENCY_KEY_MISSING]: 400,
    [IdempotencyErrorCodes.REQUEST_IN_PROGRESS]: 409,
  };
  const middleware = async (req, res, next) => {
    const ireq = { headers: req.headers, body: req.body, path: req.originalUrl, method: req.method };
    let cached;
    try {
      cached = await idem.onRequest(ireq);
    } catch (err) {
      if (!(err instanceof IdempotencyError)) return next(err);
      if (err.code === IdempotencyErrorCodes.REQUEST_IN_PROGRESS) res.set('Retry-After', '1');
      return res.status(statuses[err.code] || 500).json({ message: err.message });
    }
    if (cached) {
      const extra = cached.additional || {};
      res.status(extra.statusCode || 200);
      if (extra['Content-Type']) res.set('Content-Type', extra['Content-Type']);
      res.set('Idempotent-Replayed', 'true');
      return res.send(cached.body);
    }
    const json = res.json.bind(res);
    res.json = (body) => {
      const additional = { statusCode: res.statusCode, 'Content-Type': 'application/json; charset=utf-8' };
      idem.onResponse(ireq, { body, additional }).then(() => json(body), (err) => next(err));
      return res;
    };
    next();
  };
  app.post('/v1/orders', express.json(), middleware, handler);
}

async function main() {
  const app = express();
  app.set('etag', false);
  app.set('x-powered-by', false);
  app.get('/count', (req, res) => {
    const key = String(req.query.key || '');
    res.json({ key, executions: counts.get(key) || 0, total });
  });
  app.get('/healthz', (req, res) => res.send('ok'));
  switch (opts.mode) {
    case 'none':
      app.post('/v1/orders', express.json(), handler);
      break;
    case 'express-idempotency':
      await expressIdempotency(app);
      break;
    case 'node-idempotency':
      await nodeIdempotency(app);
      break;
    default:
      throw new Error('unknown --mode ' + opts.mode);
  }
  const server = app.listen(Number(opts.port), '127.0.0.1', () => {
    const a = server.address();
    process.stdout.write(`${a.address}:${a.port}\n`);
  });
  // Keep-alive connections from the load generator stay open between
  // phases, as they do on the Go targets.
  server.keepAliveTimeout = 120000;
  server.headersTimeout = 121000;
  // Nothing to drain: the bench stops it between runs.
  process.on('SIGTERM', () => process.exit(0));
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
