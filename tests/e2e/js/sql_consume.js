// ali-ons push consumer with an SQL92 subscription: node sql_consume.js NAMESRV TOPIC GROUP SQL EXPECT IDLE_SECS
// ali-ons 3.12 subscribes with SQL through subscribe(topic, {expressionType, subString}) and sends the expression
// with every pull. Prints one JSON line per message ({"body", "keys"}) and one per error ({"error", "code"});
// exits after EXPECT messages (then lingers 6 s so offsets are committed) or after IDLE_SECS without a message.
'use strict';
const { Consumer } = require('ali-ons');
const [nameSrv, topic, group, sql, expect, idleSecs] = process.argv.slice(2);
const httpclient = { request: async () => { throw new Error('no http'); } };
const consumer = new Consumer({ httpclient, nameSrv, consumerGroup: group, responseTimeout: 5000, persistent: true,
  consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET', pullBatchSize: 32 });
let got = 0;
let idle;
const finish = async () => { await consumer.close().catch(() => {}); process.exit(0); };
const rearm = () => { clearTimeout(idle); idle = setTimeout(finish, Number(idleSecs) * 1000); };
// a refused subscription shows as errors only: report the first few, then stop
let errors = 0;
consumer.on('error', err => {
  console.log(JSON.stringify({ error: err.message, code: err.code === undefined ? null : err.code }));
  errors += 1;
  if (got === 0 && errors === 1) { clearTimeout(idle); idle = setTimeout(finish, 1000); }
});
rearm();
consumer.subscribe(topic, { expressionType: 'SQL92', subString: sql }, async msg => {
  got += 1;
  console.log(JSON.stringify({ body: msg.body.toString(), keys: msg.keys }));
  rearm();
  if (got >= Number(expect)) { clearTimeout(idle); setTimeout(finish, 6000); }
});
