// ali-ons push consumer: node consume.js NAMESRV TOPIC GROUP TAGEXPR EXPECT IDLE_SECS
// prints one JSON line per message; exits after EXPECT messages (then lingers 6 s so offsets are committed)
// or after IDLE_SECS without a message.
'use strict';
const { Consumer } = require('ali-ons');
const [nameSrv, topic, group, tags, expect, idleSecs] = process.argv.slice(2);
const httpclient = { request: async () => { throw new Error('no http'); } };
const consumer = new Consumer({ httpclient, nameSrv, consumerGroup: group, responseTimeout: 5000, persistent: true });
consumer.on('error', err => console.error('consumer error:', err.message));
let got = 0;
let idle;
const finish = async () => { await consumer.close().catch(() => {}); process.exit(0); };
const rearm = () => { clearTimeout(idle); idle = setTimeout(finish, Number(idleSecs) * 1000); };
rearm();
consumer.subscribe(topic, tags, async msg => {
  got += 1;
  console.log(JSON.stringify({ topic: msg.topic, tags: msg.tags, keys: msg.keys, msgId: msg.msgId, queueId: msg.queueId, queueOffset: msg.queueOffset, size: msg.body.length }));
  rearm();
  if (got >= Number(expect)) { clearTimeout(idle); setTimeout(finish, 6000); }
});
