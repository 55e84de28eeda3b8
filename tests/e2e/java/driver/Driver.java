// The official Apache RocketMQ Java client (4.9.8) driven from the pyrmq test suite (tests/e2e/test_java_client.py).
//
// One JVM serves a whole test module: it reads one JSON command per line on stdin and answers each with one JSON
// line {"id": <the command's id>, "ok": true|false, ...} on stdout. Producers are kept per group; push consumers run
// in the background under a name and buffer what they receive until a "collect" command drains it. Nothing but the
// answers is written to stdout (logging goes to files, configured by the test fixture).

import com.alibaba.fastjson.JSON;
import com.alibaba.fastjson.JSONArray;
import com.alibaba.fastjson.JSONObject;
import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.MessageSelector;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.ConsumeOrderlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.listener.MessageListenerOrderly;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.utils.MessageUtil;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageClientExt;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.protocol.heartbeat.MessageModel;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;
import org.apache.rocketmq.tools.command.MQAdminStartup;

public class Driver {
    private static final PrintStream OUT = System.out;
    private static String namesrv;
    private static final Map<String, DefaultMQProducer> producers = new HashMap<>();
    private static final Map<String, Consumer> consumers = new HashMap<>();
    private static DefaultMQAdminExt admin;
    // client ids are ip@instanceName: names carry the pid so that two driver JVMs never share one
    private static final String PID = Long.toString(ProcessHandle.current().pid());
    private static final String SHARED = PID + "-driver";

    /** A named push consumer and what it received, in arrival order. */
    static final class Consumer {
        final DefaultMQPushConsumer push;
        final List<JSONObject> received = new ArrayList<>();
        final Set<String> failedOnce = ConcurrentHashMap.newKeySet();

        Consumer(DefaultMQPushConsumer push) {
            this.push = push;
        }

        synchronized void add(JSONObject m) {
            received.add(m);
            notifyAll();
        }
    }

    public static void main(String[] args) throws Exception {
        namesrv = args[0];
        // Everything the client libraries print goes to stderr; stdout carries only the answers.
        System.setOut(System.err);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            JSONObject cmd = JSON.parseObject(line);
            JSONObject answer;
            try {
                answer = handle(cmd);
            } catch (Throwable e) {
                answer = new JSONObject();
                answer.put("ok", false);
                answer.put("error", e.toString());
                answer.put("cause", e.getCause() == null ? null : e.getCause().toString());
            }
            answer.putIfAbsent("ok", true);
            answer.put("id", cmd.get("id"));
            synchronized (OUT) {
                OUT.println(answer.toJSONString());
                OUT.flush();
            }
            if ("exit".equals(cmd.getString("op"))) {
                break;
            }
        }
        for (Consumer c : consumers.values()) {
            c.push.shutdown();
        }
        for (DefaultMQProducer p : producers.values()) {
            p.shutdown();
        }
        if (admin != null) {
            admin.shutdown();
        }
        System.exit(0);
    }

    static JSONObject handle(JSONObject cmd) throws Exception {
        switch (cmd.getString("op")) {
            case "produce":
                return produce(cmd);
            case "consume":
                return consume(cmd);
            case "collect":
                return collect(cmd);
            case "assigned":
                return assigned(cmd);
            case "stop":
                consumers.remove(cmd.getString("name")).push.shutdown();
                return new JSONObject();
            case "admin":
                return admin(cmd);
            case "mqadmin":
                return mqadmin(cmd);
            case "exit":
                return new JSONObject();
            default:
                throw new IllegalArgumentException("unknown op " + cmd.getString("op"));
        }
    }

    // -- producing ------------------------------------------------------------------------------------------

    static synchronized DefaultMQProducer producer(JSONObject cmd) throws Exception {
        String group = cmd.getString("group");
        boolean vip = cmd.getBooleanValue("vip");
        String key = group + (vip ? "#vip" : "");
        DefaultMQProducer p = producers.get(key);
        if (p == null) {
            p = new DefaultMQProducer(group);
            p.setNamesrvAddr(namesrv);
            p.setInstanceName(vip ? PID + "-vip" : SHARED);
            p.setVipChannelEnabled(vip);
            p.setPollNameServerInterval(1000);
            p.setHeartbeatBrokerInterval(1000);
            // the shared client instance takes its timers from the first client that starts it, often a producer
            p.setPersistConsumerOffsetInterval(1000);
            p.start();
            producers.put(key, p);
        }
        return p;
    }

    static Message message(JSONObject cmd, int i) {
        String key = cmd.getString("keyPrefix") + "-" + i;
        String body = cmd.getString("body") == null ? "body-" + key : cmd.getString("body");
        Message m = new Message(cmd.getString("topic"), cmd.getString("tags"), key, body.getBytes(StandardCharsets.UTF_8));
        if (cmd.containsKey("tagCycle")) {
            JSONArray tags = cmd.getJSONArray("tagCycle");
            m.setTags(tags.getString(i % tags.size()));
        }
        if (cmd.getIntValue("delayLevel") > 0) {
            m.setDelayTimeLevel(cmd.getIntValue("delayLevel"));
        }
        m.putUserProperty("seq", Integer.toString(i));
        return m;
    }

    static JSONObject sendResult(SendResult r, Message m) {
        JSONObject o = new JSONObject();
        o.put("status", r.getSendStatus().name());
        o.put("msgId", r.getMsgId());
        o.put("offsetMsgId", r.getOffsetMsgId());
        o.put("brokerName", r.getMessageQueue().getBrokerName());
        o.put("queueId", r.getMessageQueue().getQueueId());
        o.put("queueOffset", r.getQueueOffset());
        if (m != null) {
            o.put("keys", m.getKeys());
            o.put("tags", m.getTags());
        }
        return o;
    }

    static JSONObject produce(JSONObject cmd) throws Exception {
        DefaultMQProducer p = producer(cmd);
        int count = cmd.getIntValue("count");
        String mode = cmd.getString("mode");
        JSONArray sent = new JSONArray();
        switch (mode) {
            case "sync":
                for (int i = 0; i < count; i++) {
                    Message m = message(cmd, i);
                    sent.add(sendResult(p.send(m), m));
                }
                break;
            case "async": {
                CountDownLatch done = new CountDownLatch(count);
                List<JSONObject> results = new ArrayList<>();
                for (int i = 0; i < count; i++) {
                    final Message m = message(cmd, i);
                    p.send(m, new SendCallback() {
                        public void onSuccess(SendResult r) {
                            synchronized (results) {
                                results.add(sendResult(r, m));
                            }
                            done.countDown();
                        }

                        public void onException(Throwable e) {
                            JSONObject o = new JSONObject();
                            o.put("status", "EXCEPTION");
                            o.put("error", e.toString());
                            o.put("keys", m.getKeys());
                            synchronized (results) {
                                results.add(o);
                            }
                            done.countDown();
                        }
                    });
                }
                if (!done.await(cmd.getLongValue("timeoutMs"), TimeUnit.MILLISECONDS)) {
                    throw new IllegalStateException("async sends: only " + (count - done.getCount()) + " of " + count + " answered");
                }
                synchronized (results) {
                    sent.addAll(results);
                }
                break;
            }
            case "oneway":
                for (int i = 0; i < count; i++) {
                    Message m = message(cmd, i);
                    p.sendOneway(m);
                    JSONObject o = new JSONObject();
                    o.put("keys", m.getKeys());
                    o.put("msgId", MessageClientIDSetter.getUniqID(m));
                    sent.add(o);
                }
                break;
            case "batch": {
                List<Message> batch = new ArrayList<>();
                for (int i = 0; i < count; i++) {
                    batch.add(message(cmd, i));
                }
                SendResult r = p.send(batch);
                JSONObject o = sendResult(r, null);
                JSONArray ids = new JSONArray();
                for (Message m : batch) {
                    ids.add(MessageClientIDSetter.getUniqID(m));
                }
                o.put("msgIds", ids);
                sent.add(o);
                break;
            }
            case "ordered": {
                // message i belongs to order i % orders; the selector keeps each order on one queue
                int orders = cmd.getIntValue("orders");
                for (int i = 0; i < count; i++) {
                    Message m = message(cmd, i);
                    m.putUserProperty("order", Integer.toString(i % orders));
                    SendResult r = p.send(m, (mqs, msg, arg) -> mqs.get((Integer) arg % mqs.size()), i % orders);
                    sent.add(sendResult(r, m));
                }
                break;
            }
            case "request":
                // request-reply: each send waits for the reply a consumer sends back (pushed by the broker)
                for (int i = 0; i < count; i++) {
                    Message m = message(cmd, i);
                    Message reply = p.request(m, cmd.getLongValue("timeoutMs"));
                    JSONObject o = new JSONObject();
                    o.put("keys", m.getKeys());
                    o.put("replyTopic", reply.getTopic());
                    o.put("replyBody", new String(reply.getBody(), StandardCharsets.UTF_8));
                    o.put("replyProperties", new HashMap<>(reply.getProperties()));
                    sent.add(o);
                }
                break;
            default:
                throw new IllegalArgumentException("unknown produce mode " + mode);
        }
        JSONObject answer = new JSONObject();
        answer.put("sent", sent);
        return answer;
    }

    // -- consuming ------------------------------------------------------------------------------------------

    static JSONObject record(String name, MessageExt m) {
        JSONObject o = new JSONObject();
        o.put("consumer", name);
        o.put("topic", m.getTopic());
        o.put("tags", m.getTags());
        o.put("keys", m.getKeys());
        o.put("body", new String(m.getBody(), StandardCharsets.UTF_8));
        o.put("queueId", m.getQueueId());
        o.put("queueOffset", m.getQueueOffset());
        o.put("brokerName", m.getBrokerName());
        o.put("msgId", m.getMsgId());
        o.put("offsetMsgId", m instanceof MessageClientExt ? ((MessageClientExt) m).getOffsetMsgId() : m.getMsgId());
        o.put("commitLogOffset", m.getCommitLogOffset());
        o.put("reconsumeTimes", m.getReconsumeTimes());
        o.put("bornTimestamp", m.getBornTimestamp());
        o.put("storeTimestamp", m.getStoreTimestamp());
        o.put("receivedAt", System.currentTimeMillis());
        o.put("properties", new HashMap<>(m.getProperties()));
        return o;
    }

    static boolean shouldFail(JSONObject cmd, Consumer c, MessageExt m) {
        String keys = m.getKeys() == null ? "" : m.getKeys();
        String always = cmd.getString("failPrefix");
        if (always != null && keys.startsWith(always)) {
            return true;
        }
        String once = cmd.getString("failOncePrefix");
        return once != null && keys.startsWith(once) && c.failedOnce.add(keys);
    }

    /** Answers a request message (request-reply) through a producer of ``replyGroup``; the send status or error. */
    static String reply(JSONObject cmd, MessageExt m) {
        try {
            byte[] body = ("reply to " + new String(m.getBody(), StandardCharsets.UTF_8)).getBytes(StandardCharsets.UTF_8);
            Message reply = MessageUtil.createReplyMessage(m, body);
            JSONObject producerCmd = new JSONObject();
            producerCmd.put("group", cmd.getString("replyGroup"));
            return producer(producerCmd).send(reply).getSendStatus().name();
        } catch (Exception e) {
            return e.toString();
        }
    }

    static JSONObject consume(JSONObject cmd) throws Exception {
        String name = cmd.getString("name");
        DefaultMQPushConsumer push = new DefaultMQPushConsumer(cmd.getString("group"));
        push.setNamesrvAddr(namesrv);
        // one client instance serves every consumer of this JVM unless the command names its own (two consumers
        // of one group need two); a running instance already persists offsets every second, a new one waits 10 s
        push.setInstanceName(cmd.getString("instance") == null ? SHARED : PID + "-" + cmd.getString("instance"));
        push.setPollNameServerInterval(1000);
        push.setHeartbeatBrokerInterval(1000);
        push.setPersistConsumerOffsetInterval(1000);
        push.setSuspendCurrentQueueTimeMillis(200);
        push.setConsumeThreadMin(4);
        push.setConsumeThreadMax(4);
        // a pull racing the heartbeat that carries a new subscription version is answered SUBSCRIPTION_NOT_LATEST
        // (by RocketMQ's broker too); retry it after 200 ms instead of the default 3 s
        push.getDefaultMQPushConsumerImpl().setPullTimeDelayMillsWhenException(200);
        push.setVipChannelEnabled(cmd.getBooleanValue("vip"));
        if (cmd.containsKey("maxReconsumeTimes")) {
            push.setMaxReconsumeTimes(cmd.getIntValue("maxReconsumeTimes"));
        }
        if ("BROADCASTING".equals(cmd.getString("model"))) {
            push.setMessageModel(MessageModel.BROADCASTING);
        }
        if (!"LAST".equals(cmd.getString("from"))) {
            push.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        }
        if (cmd.containsKey("sql")) {
            push.subscribe(cmd.getString("topic"), MessageSelector.bySql(cmd.getString("sql")));
        } else {
            push.subscribe(cmd.getString("topic"), cmd.getString("expr") == null ? "*" : cmd.getString("expr"));
        }
        Consumer c = new Consumer(push);
        if (cmd.getBooleanValue("orderly")) {
            push.registerMessageListener((MessageListenerOrderly) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    JSONObject r = record(name, m);
                    boolean fail = shouldFail(cmd, c, m);
                    r.put("failed", fail);
                    c.add(r);
                    if (fail) {
                        return ConsumeOrderlyStatus.SUSPEND_CURRENT_QUEUE_A_MOMENT;
                    }
                }
                return ConsumeOrderlyStatus.SUCCESS;
            });
        } else {
            push.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                ConsumeConcurrentlyStatus status = ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                for (MessageExt m : msgs) {
                    JSONObject r = record(name, m);
                    boolean fail = shouldFail(cmd, c, m);
                    r.put("failed", fail);
                    if (cmd.containsKey("replyGroup")) {
                        r.put("replyStatus", reply(cmd, m));
                    }
                    c.add(r);
                    if (fail) {
                        status = ConsumeConcurrentlyStatus.RECONSUME_LATER;
                    }
                }
                return status;
            });
        }
        try {
            push.start();
        } catch (Exception e) {
            push.shutdown();
            throw e;
        }
        consumers.put(name, c);
        return new JSONObject();
    }

    /** Waits until the consumer holds at least ``count`` messages (or ``timeoutMs`` passed), then ``quietMs`` more;
     *  answers with everything received since the last collect. */
    static JSONObject collect(JSONObject cmd) throws Exception {
        Consumer c = consumers.get(cmd.getString("name"));
        int count = cmd.getIntValue("count");
        long deadline = System.currentTimeMillis() + cmd.getLongValue("timeoutMs");
        synchronized (c) {
            while (c.received.size() < count && System.currentTimeMillis() < deadline) {
                c.wait(Math.max(1, deadline - System.currentTimeMillis()));
            }
        }
        long quiet = cmd.getLongValue("quietMs");
        if (quiet > 0) {
            Thread.sleep(quiet);
        }
        JSONObject answer = new JSONObject();
        synchronized (c) {
            answer.put("msgs", new JSONArray(new ArrayList<Object>(c.received)));
            c.received.clear();
        }
        return answer;
    }

    /** The queues the consumer's rebalance currently holds. */
    static JSONObject assigned(JSONObject cmd) {
        Consumer c = consumers.get(cmd.getString("name"));
        Set<String> queues = new TreeSet<>();
        for (MessageQueue mq : c.push.getDefaultMQPushConsumerImpl().getRebalanceImpl().getProcessQueueTable().keySet()) {
            if (mq.getTopic().equals(cmd.getString("topic"))) {
                queues.add(mq.getBrokerName() + ":" + mq.getQueueId());
            }
        }
        JSONObject answer = new JSONObject();
        answer.put("queues", new JSONArray(new ArrayList<Object>(queues)));
        return answer;
    }

    // -- admin ----------------------------------------------------------------------------------------------

    static JSONObject admin(JSONObject cmd) throws Exception {
        if (admin == null) {
            admin = new DefaultMQAdminExt();
            admin.setNamesrvAddr(namesrv);
            admin.setInstanceName(PID + "-admin");
            admin.start();
        }
        JSONObject answer = new JSONObject();
        JSONArray found = new JSONArray();
        switch (cmd.getString("call")) {
            case "queryMessage": {
                long now = System.currentTimeMillis();
                for (MessageExt m : admin.queryMessage(cmd.getString("topic"), cmd.getString("key"), 32, now - 3_600_000L, now + 60_000L).getMessageList()) {
                    found.add(record("admin", m));
                }
                break;
            }
            case "viewMessage":
                found.add(record("admin", cmd.containsKey("topic")
                    ? admin.viewMessage(cmd.getString("topic"), cmd.getString("msgId"))
                    : admin.viewMessage(cmd.getString("msgId"))));
                break;
            case "topicRoute":
                answer.put("result", JSON.parseObject(admin.examineTopicRouteInfo(cmd.getString("topic")).toJson()));
                break;
            default:
                throw new IllegalArgumentException("unknown admin call " + cmd.getString("call"));
        }
        answer.put("msgs", found);
        return answer;
    }

    /** One `mqadmin` command (MQAdminStartup) in this JVM, its stdout and stderr captured. */
    static synchronized JSONObject mqadmin(JSONObject cmd) {
        String[] args = cmd.getJSONArray("args").toArray(new String[0]);
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        PrintStream savedOut = System.out;
        PrintStream savedErr = System.err;
        System.setOut(new PrintStream(out, true, StandardCharsets.UTF_8));
        System.setErr(new PrintStream(err, true, StandardCharsets.UTF_8));
        try {
            MQAdminStartup.main0(args, null);
        } finally {
            System.setOut(savedOut);
            System.setErr(savedErr);
        }
        JSONObject answer = new JSONObject();
        answer.put("out", out.toString(StandardCharsets.UTF_8));
        answer.put("err", err.toString(StandardCharsets.UTF_8));
        return answer;
    }
}
