// ali-ons producer: node produce.js NAMESRV TOPIC COUNT TAG KEY_PREFIX -> one JSON line per send result
'use strict';
const { Producer, Message } = require('ali-ons');
const [nameSrv, topic, count, tag, keyPrefix] = process.argv.slice(2);
const httpclient = { request: async () => { throw new Error('no http'); } };
const producer = new Producer({ httpclient, nameSrv, producerGroup: 'PID-e2e', responseTimeout: 5000 });
producer.on('error', err => console.error('producer error:', err.message));
(async () => {
  for (let i = 0; i < Number(count); i++) {
    const msg = new Message(topic, tag, Buffer.alloc(1024, `${keyPrefix}-${i}|`));
    msg.keys = [`${keyPrefix}-${i}`];
    const r = await producer.send(msg);
    console.log(JSON.stringify({ key: `${keyPrefix}-${i}`, status: r.sendStatus, msgId: r.msgId, queueId: r.messageQueue.queueId, queueOffset: r.queueOffset }));
  }
})().then(async () => { await producer.close(); process.exit(0); },
          async err => { console.error('send failed:', err.message); process.exit(1); });
