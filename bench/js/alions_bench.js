// node alions_bench.js NAMESRV TOPIC produce|consume COUNT [CONCURRENCY]
// prints one JSON line: {"mode", "count", "seconds"}
'use strict';
const { Producer, Consumer, Message } = require('ali-ons');
const [nameSrv, topic, mode, countArg, concArg] = process.argv.slice(2);
const count = Number(countArg);
const httpclient = { request: async () => { throw new Error('no http'); } };
const body = Buffer.alloc(1024, 'x');
(async () => {
  if (mode === 'produce') {
    const producer = new Producer({ httpclient, nameSrv, producerGroup: 'PID-bench', responseTimeout: 10000 });
    await producer.ready();
    const conc = Number(concArg || 1);
    let next = 0;
    const t0 = process.hrtime.bigint();
    const worker = async () => { while (next < count) { next++; await producer.send(new Message(topic, 'T', body)); } };
    await Promise.all(Array.from({ length: conc }, worker));
    const secs = Number(process.hrtime.bigint() - t0) / 1e9;
    console.log(JSON.stringify({ mode, count, concurrency: conc, seconds: secs }));
    await producer.close();
  } else {
    const consumer = new Consumer({ httpclient, nameSrv, consumerGroup: 'bench-' + Date.now(), responseTimeout: 10000,
                                    consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET' });
    let got = 0; let t0 = null;
    await new Promise(resolve => {
      consumer.subscribe(topic, '*', async () => {
        if (t0 === null) t0 = process.hrtime.bigint();
        got++;
        if (got >= count) resolve();
      });
    });
    const secs = Number(process.hrtime.bigint() - t0) / 1e9;
    console.log(JSON.stringify({ mode, count, seconds: secs }));
    await consumer.close().catch(() => {});
  }
  process.exit(0);
})().catch(err => { console.error(err); process.exit(1); });
