// ali-ons against a broker with ACL on (accessKeyId / accessKeySecret; "-" = no credentials).
//   node acl.js produce NAMESRV TOPIC COUNT AK SK             -> {"status":...} or {"error":...} per message
//   node acl.js consume NAMESRV TOPIC GROUP EXPECT IDLE AK SK  -> {"body":...} per message, {"error":...} per
//                                                               client error, then {"received":n}
'use strict';
const { Producer, Consumer, Message } = require('ali-ons');
const [mode, nameSrv, topic, ...rest] = process.argv.slice(2);
const httpclient = { request: async () => { throw new Error('no http'); } };
const creds = (ak, sk) => (ak === '-' ? {} : { accessKeyId: ak, accessKeySecret: sk });
const out = obj => console.log(JSON.stringify(obj));

if (mode === 'produce') {
  const [count, ak, sk] = rest;
  const producer = new Producer({ httpclient, nameSrv, producerGroup: 'PID-acl', responseTimeout: 5000, retryTimesWhenSendFailed: 0, ...creds(ak, sk) });
  producer.on('error', err => out({ error: err.message }));
  // ali-ons retries on NO_PERMISSION / SYSTEM_ERROR and then throws "Send [n] times, still failed" without the
  // broker's remark: record the error each attempt received from the broker, as the client got it
  const sendKernelImpl = producer.sendKernelImpl.bind(producer);
  producer.sendKernelImpl = async (...args) => {
    try {
      return await sendKernelImpl(...args);
    } catch (err) {
      out({ error: err.message, name: err.name, code: err.code });
      throw err;
    }
  };
  (async () => {
    for (let i = 0; i < Number(count); i++) {
      try {
        const r = await producer.send(new Message(topic, 'js', Buffer.from(`js-${i}`)));
        out({ status: r.sendStatus, msgId: r.msgId });
      } catch (err) {
        out({ error: err.message, name: err.name });
      }
    }
  })().then(async () => { await producer.close().catch(() => {}); process.exit(0); },
            err => { console.error(err); process.exit(1); });
} else if (mode === 'consume') {
  const [group, expect, idleSecs, ak, sk] = rest;
  const consumer = new Consumer({ httpclient, nameSrv, consumerGroup: group, responseTimeout: 5000, persistent: true,
                                  consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET', ...creds(ak, sk) });
  const errors = new Set();
  consumer.on('error', err => { if (!errors.has(err.message)) { errors.add(err.message); out({ error: err.message }); } });
  let got = 0;
  let idle;
  const finish = async () => { out({ received: got }); await consumer.close().catch(() => {}); process.exit(0); };
  const rearm = () => { clearTimeout(idle); idle = setTimeout(finish, Number(idleSecs) * 1000); };
  rearm();
  consumer.subscribe(topic, '*', async msg => {
    got += 1;
    out({ body: msg.body.toString() });
    rearm();
    if (got >= Number(expect)) { clearTimeout(idle); setTimeout(finish, 2000); }
  });
} else {
  console.error(`unknown mode ${mode}`);
  process.exit(2);
}
