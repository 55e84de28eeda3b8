// The Java side of the store-format oracle (tests/e2e/test_java_store_oracle.py), on the official RocketMQ Java
// client 4.9.8. Prints one JSON object per line on stdout.
//
//   Oracle produce <namesrv> <brokerAddr> <from> <to> <batch>
//                                                      create OracleA (4 queues) and OracleB (2 queues), send
//                                                      messages <from>..<to>-1 to each, round-robin over the queues
//                                                      (tags, keys, user properties), then when <batch> is 1 one
//                                                      batch of 10 to OracleB queue 0; one line per message sent
//   Oracle delayed <namesrv> <topic> <queueId> <level> <n>
//                                                      send <n> messages with delayTimeLevel <level> to one queue
//   Oracle consume <namesrv> <group> <topic> <count> <seconds>
//                                                      DefaultMQPushConsumer from the first offset until <count>
//                                                      messages arrived (or <seconds> passed); one line per
//                                                      message, then shutdown (which commits the offsets)

import com.alibaba.fastjson.JSON;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.impl.consumer.ProcessQueue;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

public class Oracle {
    static synchronized void emit(Map<String, Object> m) {
        System.out.println(JSON.toJSONString(m));
        System.out.flush();
    }

    static Map<String, Object> sent(SendResult r, Message m) {
        Map<String, Object> o = new LinkedHashMap<>();
        o.put("status", r.getSendStatus().toString());
        o.put("topic", r.getMessageQueue().getTopic());
        o.put("queueId", r.getMessageQueue().getQueueId());
        o.put("queueOffset", r.getQueueOffset());
        o.put("msgId", r.getMsgId());
        o.put("offsetMsgId", r.getOffsetMsgId());
        o.put("tags", m.getTags());
        o.put("keys", m.getKeys());
        o.put("properties", m.getProperties());
        o.put("body", new String(m.getBody(), StandardCharsets.UTF_8));
        return o;
    }

    static Message message(String topic, int i) {
        String body = "body-" + topic + "-" + i + "-" + "x".repeat(i % 97);
        Message m = new Message(topic, "tag" + (i % 3), "key-" + topic + "-" + i + " shared-" + (i % 5),
            body.getBytes(StandardCharsets.UTF_8));
        m.putUserProperty("idx", Integer.toString(i));
        m.putUserProperty("color", i % 2 == 0 ? "red" : "blue");
        return m;
    }

    static void produce(String namesrv, String broker, int from, int to, boolean withBatch) throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(namesrv);
        admin.setInstanceName("oracle-admin-" + System.nanoTime());
        admin.start();
        int[] queues = {4, 2};
        String[] topics = {"OracleA", "OracleB"};
        for (int t = 0; t < topics.length; t++) {
            TopicConfig tc = new TopicConfig(topics[t], queues[t], queues[t], 6);
            admin.createAndUpdateTopicConfig(broker, tc);
        }
        admin.shutdown();
        DefaultMQProducer producer = new DefaultMQProducer("oracle_producer");
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("oracle-producer-" + System.nanoTime());
        producer.start();
        try {
            for (int i = from; i < to; i++) {
                for (int t = 0; t < topics.length; t++) {
                    Message m = message(topics[t], i);
                    MessageQueue mq = new MessageQueue(topics[t], "broker-a", i % queues[t]);
                    emit(sent(producer.send(m, mq, 10000), m));
                }
            }
            if (!withBatch) {
                return;
            }
            List<Message> batch = new ArrayList<>();
            for (int i = 0; i < 10; i++) {
                batch.add(message("OracleB", to + i));
            }
            SendResult r = producer.send(batch, new MessageQueue("OracleB", "broker-a", 0), 10000);
            String[] ids = r.getMsgId().split(",");
            String[] offsetIds = r.getOffsetMsgId().split(",");
            for (int i = 0; i < batch.size(); i++) {
                Map<String, Object> o = sent(r, batch.get(i));
                o.put("queueOffset", r.getQueueOffset() + i);
                o.put("msgId", ids[i]);
                o.put("offsetMsgId", offsetIds[i]);
                emit(o);
            }
        } finally {
            producer.shutdown();
        }
    }

    static void delayed(String namesrv, String topic, int queueId, int level, int n) throws Exception {
        DefaultMQProducer producer = new DefaultMQProducer("oracle_producer");
        producer.setNamesrvAddr(namesrv);
        producer.setInstanceName("oracle-producer-" + System.nanoTime());
        producer.start();
        try {
            for (int i = 0; i < n; i++) {
                Message m = new Message(topic, "late", "delayed-" + topic + "-" + i,
                    ("delayed-" + i).getBytes(StandardCharsets.UTF_8));
                m.putUserProperty("idx", "d" + i);
                m.setDelayTimeLevel(level);
                emit(sent(producer.send(m, new MessageQueue(topic, "broker-a", queueId), 10000), m));
            }
        } finally {
            producer.shutdown();
        }
    }

    static void consume(String namesrv, String group, String topic, int count, int seconds) throws Exception {
        CountDownLatch done = new CountDownLatch(count);
        AtomicInteger seen = new AtomicInteger();
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setInstanceName("oracle-consumer-" + System.nanoTime());
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.subscribe(topic, "*");
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
            for (MessageExt m : msgs) {
                Map<String, Object> o = new LinkedHashMap<>();
                o.put("topic", m.getTopic());
                o.put("queueId", m.getQueueId());
                o.put("queueOffset", m.getQueueOffset());
                o.put("commitLogOffset", m.getCommitLogOffset());
                o.put("msgId", m.getMsgId());
                o.put("offsetMsgId", m instanceof MessageClientExt ? ((MessageClientExt) m).getOffsetMsgId() : m.getMsgId());
                o.put("tags", m.getTags());
                o.put("keys", m.getKeys());
                o.put("properties", m.getProperties());
                o.put("body", new String(m.getBody(), StandardCharsets.UTF_8));
                o.put("bodyCRC", m.getBodyCRC());
                o.put("reconsumeTimes", m.getReconsumeTimes());
                o.put("storeHost", m.getStoreHost().toString());
                o.put("bornTimestamp", m.getBornTimestamp());
                o.put("storeTimestamp", m.getStoreTimestamp());
                emit(o);
                seen.incrementAndGet();
                done.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        consumer.start();
        done.await(seconds, TimeUnit.SECONDS);
        // shutdown commits the offsets the offset store holds: wait (10 s at most) until every pulled message was
        // consumed and its offset recorded (a fixed 500 ms sleep lost that race on a busy machine: offsets of 0)
        long deadline = System.currentTimeMillis() + 10_000;
        while (System.currentTimeMillis() < deadline && !settled(consumer)) {
            Thread.sleep(50);
        }
        Thread.sleep(100);  // the offset is updated right after the message leaves its process queue
        consumer.shutdown();
        Map<String, Object> end = new LinkedHashMap<>();
        end.put("end", seen.get());
        emit(end);
    }

    /** No pulled message waits for, or is in, the listener. */
    static boolean settled(DefaultMQPushConsumer consumer) {
        for (ProcessQueue pq : consumer.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().values()) {
            if (pq.getMsgCount().get() > 0) {
                return false;
            }
        }
        return true;
    }

    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "produce":
                produce(args[1], args[2], Integer.parseInt(args[3]), Integer.parseInt(args[4]), "1".equals(args[5]));
                break;
            case "delayed":
                delayed(args[1], args[2], Integer.parseInt(args[3]), Integer.parseInt(args[4]), Integer.parseInt(args[5]));
                break;
            case "consume":
                consume(args[1], args[2], args[3], Integer.parseInt(args[4]), Integer.parseInt(args[5]));
                break;
            default:
                throw new IllegalArgumentException("unknown command " + args[0]);
        }
        System.exit(0);
    }
}
