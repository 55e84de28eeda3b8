import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.MessageExt;

/**
 * The official 4.9.8 push consumer subscribing with MessageSelector.bySql:
 * java SqlConsumer NAMESRV TOPIC GROUP SQL EXPECT IDLE_SECS [SQL2 EXPECT2]
 * Prints {"body": ...} per message, or {"error": ..., "code": ...} when start() is refused; exits after EXPECT
 * messages or IDLE_SECS without one (shutdown persists the offsets). With SQL2, once EXPECT messages arrived the
 * running consumer subscribes again with SQL2 (no restart), prints {"resubscribed": true} and goes on until EXPECT2
 * more messages or IDLE_SECS without one.
 */
public class SqlConsumer {
    static String json(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    public static void main(String[] args) throws Exception {
        String namesrv = args[0], topic = args[1], group = args[2], sql = args[3];
        int expect = Integer.parseInt(args[4]);
        long idleMs = Long.parseLong(args[5]) * 1000;
        DefaultMQPushConsumer consumer = new DefaultMQPushConsumer(group);
        consumer.setNamesrvAddr(namesrv);
        consumer.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        consumer.setInstanceName("sql-" + group + "-" + System.nanoTime());
        AtomicInteger got = new AtomicInteger();
        AtomicLong last = new AtomicLong(System.currentTimeMillis());
        CountDownLatch done = new CountDownLatch(1);
        try {
            consumer.subscribe(topic, MessageSelector.bySql(sql));
        } catch (MQClientException e) {
            System.out.println("{\"error\":" + json(String.valueOf(e.getMessage())) + ",\"code\":" + e.getResponseCode() + "}");
            return;
        }
        consumer.registerMessageListener((MessageListenerConcurrently) (msgs, context) -> {
            for (MessageExt m : msgs) {
                synchronized (System.out) {
                    System.out.println("{\"body\":" + json(new String(m.getBody())) + "}");
                }
                last.set(System.currentTimeMillis());
                if (got.incrementAndGet() >= expect) done.countDown();
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        try {
            consumer.start();
        } catch (MQClientException e) {
            System.out.println("{\"error\":" + json(String.valueOf(e.getErrorMessage())) + ",\"code\":" + e.getResponseCode() + "}");
            consumer.shutdown();
            System.exit(0);
        }
        while (!done.await(200, TimeUnit.MILLISECONDS)) {
            if (System.currentTimeMillis() - last.get() > idleMs) break;
        }
        if (args.length > 7 && done.getCount() == 0) {
            Thread.sleep(500);  // the next pulls park under the first expression
            // subscribe() on a started consumer: the new SubscriptionData (a new subVersion) goes out in a heartbeat
            consumer.subscribe(topic, MessageSelector.bySql(args[6]));
            System.out.println("{\"resubscribed\":true}");
            System.out.flush();
            int total = expect + Integer.parseInt(args[7]);
            last.set(System.currentTimeMillis());
            while (got.get() < total && System.currentTimeMillis() - last.get() <= idleMs) {
                Thread.sleep(100);
            }
        }
        Thread.sleep(1000);  // let in-flight acks land in the offset store before shutdown persists it
        consumer.shutdown();
        System.out.flush();
        System.exit(0);
    }
}
