import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.apis.ClientConfiguration;
import org.apache.rocketmq.client.apis.ClientConfigurationBuilder;
import org.apache.rocketmq.client.apis.ClientException;
import org.apache.rocketmq.client.apis.ClientServiceProvider;
import org.apache.rocketmq.client.apis.StaticSessionCredentialsProvider;
import org.apache.rocketmq.client.apis.consumer.ConsumeResult;
import org.apache.rocketmq.client.apis.consumer.FilterExpression;
import org.apache.rocketmq.client.apis.consumer.FilterExpressionType;
import org.apache.rocketmq.client.apis.consumer.PushConsumer;
import org.apache.rocketmq.client.apis.consumer.SimpleConsumer;
import org.apache.rocketmq.client.apis.message.Message;
import org.apache.rocketmq.client.apis.message.MessageBuilder;
import org.apache.rocketmq.client.apis.message.MessageView;
import org.apache.rocketmq.client.apis.producer.Producer;
import org.apache.rocketmq.client.apis.producer.ProducerBuilder;
import org.apache.rocketmq.client.apis.producer.SendReceipt;
import org.apache.rocketmq.client.apis.producer.Transaction;
import org.apache.rocketmq.client.apis.producer.TransactionResolution;

/**
 * The official RocketMQ 5.x Java client (rocketmq-client-java) against an endpoint: one JSON line per message, as
 * tests/plugins/grpc/scripts/{produce,consume}.py print them, so the tests read both clients the same way.
 *
 *   Client5 produce ENDPOINT key=value...   topic, kind (normal|fifo|delay|transaction), count, tag, body, group,
 *                                           groups (a,b,c: message i gets group i mod 3, its body "<group>-<i>"),
 *                                           delay_s, resolution (commit|rollback|none; a list a,b,c: message i gets
 *                                           the (i mod n)th), check (commit|rollback), wait_check_s, checks, key,
 *                                           prop (k:v), ak, sk, tls (true|false)
 *   Client5 simple ENDPOINT key=value...    topic, group, count, deadline_s, tag, sql, max, invisible_s, await_s,
 *                                           ack (true|false), change_s, settle_s, ak, sk, tls
 *   Client5 push ENDPOINT key=value...      topic, group, count, deadline_s, tag, sql, fail, threads, ak, sk, tls,
 *                                           close_ms (how long to let close() wait for the parked long poll: the
 *                                           client's close waits for it, up to the server's long-polling timeout)
 */
public class Client5 {
    static final Object OUT = new Object();

    static String q(String s) {
        if (s == null) {
            return "null";
        }
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"': b.append("\\\""); break;
                case '\\': b.append("\\\\"); break;
                case '\n': b.append("\\n"); break;
                case '\r': b.append("\\r"); break;
                case '\t': b.append("\\t"); break;
                default:
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
            }
        }
        return b.append('"').toString();
    }

    static void line(String json) {
        synchronized (OUT) {
            System.out.println(json);
            System.out.flush();
        }
    }

    static void error(Throwable e) {
        Throwable root = e;
        while (root.getCause() != null && root.getCause() != root) {
            root = root.getCause();
        }
        String code = null;  // ClientException's response code is in its message ("responseCode=40013")
        line("{\"error\": " + q(String.valueOf(e.getMessage())) + ", \"type\": " + q(e.getClass().getSimpleName())
            + ", \"cause\": " + q(String.valueOf(root)) + ", \"code\": " + q(code) + "}");
    }

    static String describe(MessageView m) {
        ByteBuffer body = m.getBody().duplicate();
        byte[] bytes = new byte[body.remaining()];
        body.get(bytes);
        List<String> keys = new ArrayList<>(m.getKeys());
        Collections.sort(keys);
        StringBuilder ks = new StringBuilder("[");
        for (int i = 0; i < keys.size(); i++) {
            ks.append(i > 0 ? ", " : "").append(q(keys.get(i)));
        }
        ks.append("]");
        StringBuilder ps = new StringBuilder("{");
        int i = 0;
        for (Map.Entry<String, String> e : new TreeMap<>(m.getProperties()).entrySet()) {
            ps.append(i++ > 0 ? ", " : "").append(q(e.getKey())).append(": ").append(q(e.getValue()));
        }
        ps.append("}");
        return "\"received\": " + q(m.getMessageId().toString()) + ", \"body\": " + q(new String(bytes, StandardCharsets.UTF_8))
            + ", \"tag\": " + q(m.getTag().orElse(null)) + ", \"group\": " + q(m.getMessageGroup().orElse(null))
            + ", \"attempt\": " + m.getDeliveryAttempt() + ", \"keys\": " + ks + ", \"properties\": " + ps
            + ", \"topic\": " + q(m.getTopic()) + ", \"deliver_at\": " + m.getDeliveryTimestamp().map(String::valueOf).orElse("null")
            + ", \"at\": " + System.currentTimeMillis();
    }

    public static void main(String[] argv) throws Exception {
        String mode = argv[0];
        String endpoint = argv[1];
        Map<String, String> a = new HashMap<>();
        List<String> props = new ArrayList<>();
        for (int i = 2; i < argv.length; i++) {
            int eq = argv[i].indexOf('=');
            String k = argv[i].substring(0, eq), v = argv[i].substring(eq + 1);
            if (k.equals("prop")) {
                props.add(v);
            } else {
                a.put(k, v);
            }
        }
        ClientServiceProvider provider = ClientServiceProvider.loadService();
        ClientConfigurationBuilder cb = ClientConfiguration.newBuilder().setEndpoints(endpoint)
            .enableSsl(Boolean.parseBoolean(a.getOrDefault("tls", "false")))
            .setRequestTimeout(Duration.ofSeconds(Long.parseLong(a.getOrDefault("timeout", "10"))));
        if (a.containsKey("ak")) {
            cb.setCredentialProvider(new StaticSessionCredentialsProvider(a.get("ak"), a.getOrDefault("sk", "")));
        }
        ClientConfiguration config = cb.build();
        String topic = a.get("topic");
        int count = Integer.parseInt(a.getOrDefault("count", "1"));
        int code = 0;
        try {
            if (mode.equals("produce")) {
                produce(provider, config, topic, a, props, count);
            } else if (mode.equals("simple")) {
                simple(provider, config, topic, a, count);
            } else {
                push(provider, config, topic, a, count);
            }
        } catch (Throwable e) {
            error(e);
            code = 0;
        }
        System.exit(code);
    }

    static FilterExpression expression(Map<String, String> a) {
        if (a.containsKey("sql")) {
            return new FilterExpression(a.get("sql"), FilterExpressionType.SQL92);
        }
        return new FilterExpression(a.getOrDefault("tag", "*"), FilterExpressionType.TAG);
    }

    static void produce(ClientServiceProvider provider, ClientConfiguration config, String topic, Map<String, String> a,
                        List<String> props, int count) throws Exception {
        String kind = a.getOrDefault("kind", "normal");
        Set<String> checks = ConcurrentHashMap.newKeySet();
        ProducerBuilder builder = provider.newProducerBuilder().setClientConfiguration(config).setTopics(topic);
        if (kind.equals("transaction")) {
            builder.setTransactionChecker(view -> {
                checks.add(view.getMessageId().toString());
                ByteBuffer body = view.getBody().duplicate();
                byte[] bytes = new byte[body.remaining()];
                body.get(bytes);
                line("{\"checked\": " + q(view.getMessageId().toString()) + ", \"topic\": " + q(view.getTopic())
                    + ", \"body\": " + q(new String(bytes, StandardCharsets.UTF_8)) + "}");
                return a.getOrDefault("check", "commit").equals("commit") ? TransactionResolution.COMMIT
                    : TransactionResolution.ROLLBACK;
            });
        }
        Producer producer = builder.build();
        try {
            String[] groups = a.containsKey("groups") ? a.get("groups").split(",") : null;
            String[] resolutions = a.getOrDefault("resolution", "commit").split(",");
            for (int i = 0; i < count; i++) {
                String group = groups != null ? groups[i % groups.length] : a.getOrDefault("group", "g1");
                String prefix = groups != null ? group : a.getOrDefault("body", "body");
                MessageBuilder mb = provider.newMessageBuilder().setTopic(topic)
                    .setBody((prefix + "-" + i).getBytes(StandardCharsets.UTF_8));
                if (a.containsKey("tag")) {
                    mb.setTag(a.get("tag"));
                }
                if (a.containsKey("key")) {
                    mb.setKeys(a.get("key"));
                }
                for (String p : props) {
                    int c = p.indexOf(':');
                    mb.addProperty(p.substring(0, c), p.substring(c + 1));
                }
                if (kind.equals("fifo")) {
                    mb.setMessageGroup(group);
                }
                if (kind.equals("delay")) {
                    mb.setDeliveryTimestamp(System.currentTimeMillis() + 1000L * Long.parseLong(a.getOrDefault("delay_s", "3")));
                }
                Message m = mb.build();
                try {
                    if (kind.equals("transaction")) {
                        Transaction tx = producer.beginTransaction();
                        SendReceipt r = producer.send(m, tx);
                        String resolution = resolutions[i % resolutions.length];
                        if (resolution.equals("commit")) {
                            tx.commit();
                        } else if (resolution.equals("rollback")) {
                            tx.rollback();
                        }
                        line("{\"sent\": " + i + ", \"message_id\": " + q(r.getMessageId().toString())
                            + ", \"resolution\": " + q(resolution) + "}");
                    } else {
                        SendReceipt r = producer.send(m);
                        line("{\"sent\": " + i + ", \"message_id\": " + q(r.getMessageId().toString())
                            + (kind.equals("fifo") ? ", \"group\": " + q(group) : "") + "}");
                    }
                } catch (Throwable e) {
                    error(e);
                }
            }
            long deadline = System.currentTimeMillis() + 1000L * Long.parseLong(a.getOrDefault("wait_check_s", "0"));
            int want = Integer.parseInt(a.getOrDefault("checks", "1"));
            while (System.currentTimeMillis() < deadline && checks.size() < want) {
                Thread.sleep(100);
            }
            if (!checks.isEmpty()) {
                Thread.sleep(500);
            }
        } finally {
            producer.close();
        }
    }

    static void simple(ClientServiceProvider provider, ClientConfiguration config, String topic, Map<String, String> a,
                       int count) throws Exception {
        SimpleConsumer consumer = provider.newSimpleConsumerBuilder().setClientConfiguration(config)
            .setConsumerGroup(a.get("group"))
            .setAwaitDuration(Duration.ofSeconds(Long.parseLong(a.getOrDefault("await_s", "5"))))
            .setSubscriptionExpressions(Collections.singletonMap(topic, expression(a))).build();
        Thread.sleep(1000L * Long.parseLong(a.getOrDefault("settle_s", "0")));
        Set<String> done = new java.util.HashSet<>();
        Set<String> changed = new java.util.HashSet<>();
        long deadline = System.currentTimeMillis() + 1000L * Long.parseLong(a.getOrDefault("deadline_s", "30"));
        boolean ack = Boolean.parseBoolean(a.getOrDefault("ack", "true"));
        try {
            while (done.size() < count && System.currentTimeMillis() < deadline) {
                List<MessageView> got;
                try {
                    got = consumer.receive(Integer.parseInt(a.getOrDefault("max", "16")),
                        Duration.ofSeconds(Long.parseLong(a.getOrDefault("invisible_s", "15"))));
                } catch (Throwable e) {
                    error(e);
                    break;
                }
                for (MessageView m : got) {
                    line("{" + describe(m) + "}");
                    String id = m.getMessageId().toString();
                    if (a.containsKey("change_s") && changed.add(id)) {
                        try {
                            consumer.changeInvisibleDuration(m, Duration.ofSeconds(Long.parseLong(a.get("change_s"))));
                            line("{\"changed\": " + q(id) + "}");
                        } catch (Throwable e) {
                            error(e);
                        }
                        continue;
                    }
                    if (ack) {
                        try {
                            consumer.ack(m);
                            line("{\"acked\": " + q(id) + "}");
                            done.add(id);
                        } catch (Throwable e) {
                            error(e);
                        }
                    } else {
                        done.add(id);
                    }
                }
            }
        } finally {
            line("{\"done\": " + done.size() + "}");
            closeWithin(consumer, 10_000);
        }
    }

    /**
     * close() with a bound: the client's RpcClientImpl.shutdown waits for its gRPC channel's termination without a
     * limit, so a stream the server never ends hangs it (pyrmq lost the trailers of streams open at the client's
     * GOAWAY until its transport kept them open; tests/plugins/grpc/test_transport.py holds that). Past the bound,
     * every thread's stack goes to stderr and a {"close_stuck": ...} line to stdout, for the test to report.
     */
    static void closeWithin(AutoCloseable client, long millis) throws InterruptedException {
        Thread closer = new Thread(() -> {
            try {
                client.close();
            } catch (Exception e) {
                error(e);
            }
        });
        closer.setDaemon(true);
        closer.start();
        closer.join(millis);
        if (closer.isAlive()) {
            for (Map.Entry<Thread, StackTraceElement[]> t : Thread.getAllStackTraces().entrySet()) {
                System.err.println("thread " + t.getKey().getName() + " (" + t.getKey().getState() + ")");
                for (StackTraceElement frame : t.getValue()) {
                    System.err.println("    at " + frame);
                }
            }
            line("{\"close_stuck\": " + millis + "}");
        }
    }

    static void push(ClientServiceProvider provider, ClientConfiguration config, String topic, Map<String, String> a,
                     int count) throws Exception {
        int fail = Integer.parseInt(a.getOrDefault("fail", "0"));
        Map<String, Integer> calls = new ConcurrentHashMap<>();
        Set<String> done = ConcurrentHashMap.newKeySet();
        CountDownLatch finished = new CountDownLatch(1);
        PushConsumer consumer = provider.newPushConsumerBuilder().setClientConfiguration(config)
            .setConsumerGroup(a.get("group"))
            .setConsumptionThreadCount(Integer.parseInt(a.getOrDefault("threads", "4")))
            .setSubscriptionExpressions(Collections.singletonMap(topic, expression(a)))
            .setMessageListener(m -> {
                synchronized (OUT) {
                    line("{" + describe(m) + "}");
                    String id = m.getMessageId().toString();
                    int n = calls.merge(id, 1, Integer::sum);
                    if (n <= fail) {
                        return ConsumeResult.FAILURE;
                    }
                    done.add(id);
                    if (done.size() >= count) {
                        finished.countDown();
                    }
                    return ConsumeResult.SUCCESS;
                }
            }).build();
        try {
            finished.await(Long.parseLong(a.getOrDefault("deadline_s", "30")), TimeUnit.SECONDS);
            Thread.sleep(Long.parseLong(a.getOrDefault("linger_ms", "500")));  // the last acks go out
        } finally {
            line("{\"done\": " + done.size() + "}");
            Thread closer = new Thread(() -> {
                try {
                    consumer.close();
                } catch (Exception e) {
                    error(e);
                }
            });
            closer.setDaemon(true);
            closer.start();
            closer.join(Long.parseLong(a.getOrDefault("close_ms", "1000")));
        }
    }
}
