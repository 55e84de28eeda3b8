import com.alibaba.fastjson2.JSON;
import java.lang.reflect.Field;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.rocketmq.client.consumer.AckCallback;
import org.apache.rocketmq.client.consumer.AckResult;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PopCallback;
import org.apache.rocketmq.client.consumer.PopResult;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.impl.consumer.RebalanceImpl;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.common.message.MessageRequestMode;
import org.apache.rocketmq.remoting.protocol.body.ClusterInfo;
import org.apache.rocketmq.remoting.protocol.header.AckMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.ChangeInvisibleTimeRequestHeader;
import org.apache.rocketmq.remoting.protocol.header.ExtraInfoUtil;
import org.apache.rocketmq.remoting.protocol.header.PopMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.remoting.protocol.route.TopicRouteData;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

/**
 * The official RocketMQ 5.5.0 Java remoting client consuming by POP, one scenario per run, against any broker:
 *
 *     java PopPeer <namesrv> <broker addr> <scenario> <name suffix>
 *
 * Scenarios use the raw client API (MQClientAPIImpl.popMessageAsync / ackMessageAsync / batchAckMessageAsync /
 * changeInvisibleTimeAsync / consumerSendMessageBack: the client builds receipt handles from the pop's info strings
 * itself) or DefaultMQPushConsumer in POP mode (setClientRebalance(false), the (topic, group) request mode POP set
 * with the admin's setMessageRequestMode, as mqadmin setConsumeMode does). Each run prints one JSON line:
 * {"scenario", "facts": what must be the same on every conforming broker, "info": timings and the like}.
 * tests/e2e/test_java_pop.py runs every scenario against pyrmq and against Apache RocketMQ 5.5.0 and compares.
 */
public class PopPeer {
    static String ns;
    static String broker;
    static String brokerName;
    static String suffix;
    static DefaultMQAdminExt admin;
    static DefaultMQProducer producer;
    static final Map<String, Object> facts = new LinkedHashMap<>();
    static final Map<String, Object> info = new LinkedHashMap<>();
    static final List<DefaultMQProducer> carriers = new ArrayList<>();
    static final long T0 = System.currentTimeMillis();

    public static void main(String[] args) throws Exception {
        ns = args[0];
        broker = args[1];
        String scenario = args[2];
        suffix = args[3];
        admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(ns);
        admin.setInstanceName("admin-" + suffix);
        admin.start();
        brokerName = findBrokerName();
        producer = new DefaultMQProducer("PP" + suffix);
        producer.setNamesrvAddr(ns);
        producer.setInstanceName("producer-" + suffix);
        producer.start();
        int code = 0;
        try {
            switch (scenario) {
                case "receive_ack": receiveAck(); break;
                case "change_invisible": changeInvisible(); break;
                case "expiry_attempts": expiryAttempts(); break;
                case "retry_dlq": retryDlq(); break;
                case "fifo": fifo(); break;
                case "eight": eight(); break;
                case "filters": filters(); break;
                case "push": push(); break;
                case "push_eight": pushEight(); break;
                default: throw new IllegalArgumentException("unknown scenario " + scenario);
            }
        } catch (Throwable e) {
            e.printStackTrace();
            info.put("error", String.valueOf(e));
            code = 1;
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("scenario", scenario);
        out.put("facts", facts);
        out.put("info", info);
        System.out.println(JSON.toJSONString(out));
        System.out.flush();
        Runtime.getRuntime().halt(code);  // the client threads would keep the JVM alive
    }

    // -- setup -------------------------------------------------------------------------------------------------------

    static String findBrokerName() throws Exception {
        long deadline = System.currentTimeMillis() + 30_000;
        while (true) {
            ClusterInfo cluster = admin.examineBrokerClusterInfo();
            for (BrokerData bd : cluster.getBrokerAddrTable().values()) {
                if (broker.equals(bd.getBrokerAddrs().get(0L))) {
                    return bd.getBrokerName();
                }
            }
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("no broker registered at " + broker);
            }
            Thread.sleep(200);
        }
    }

    static void createTopic(String topic, int queues) throws Exception {
        admin.createAndUpdateTopicConfig(broker, new TopicConfig(topic, queues, queues, 6));
        long deadline = System.currentTimeMillis() + 30_000;
        while (true) {
            try {
                TopicRouteData route = admin.examineTopicRouteInfo(topic);
                if (!route.getQueueDatas().isEmpty()) {
                    return;
                }
            } catch (Exception e) {
                // not routed yet
            }
            if (System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("topic " + topic + " not routed after 30 s");
            }
            Thread.sleep(100);
        }
    }

    static void createGroup(String group, boolean orderly, int retryMaxTimes) throws Exception {
        SubscriptionGroupConfig config = new SubscriptionGroupConfig();
        config.setGroupName(group);
        config.setConsumeMessageOrderly(orderly);
        config.setRetryMaxTimes(retryMaxTimes);
        admin.createAndUpdateSubscriptionGroupConfig(broker, config);
    }

    static void send(String topic, int queueId, String key, String tags, Map<String, String> props) throws Exception {
        Message msg = new Message(topic, tags, key, key.getBytes(StandardCharsets.UTF_8));
        if (props != null) {
            for (Map.Entry<String, String> e : props.entrySet()) {
                msg.putUserProperty(e.getKey(), e.getValue());
            }
        }
        producer.send(msg, new MessageQueue(topic, brokerName, queueId), 10_000);
    }

    /** A client instance of its own (its own connection), for the raw API: one "consumer". */
    static MQClientAPIImpl consumerApi(String name) throws Exception {
        DefaultMQProducer carrier = new DefaultMQProducer("PC" + name + suffix);
        carrier.setNamesrvAddr(ns);
        carrier.setInstanceName(name + "-" + suffix);
        carrier.start();
        carriers.add(carrier);
        return carrier.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl();
    }

    // -- the raw POP API ---------------------------------------------------------------------------------------------

    static PopResult pop(MQClientAPIImpl api, String group, String topic, int queueId, int n, long invisible, long poll,
                         boolean order, String attemptId, String expType, String exp) throws Exception {
        PopMessageRequestHeader h = new PopMessageRequestHeader();
        h.setConsumerGroup(group);
        h.setTopic(topic);
        h.setQueueId(queueId);
        h.setMaxMsgNums(n);
        h.setInvisibleTime(invisible);
        h.setPollTime(poll);
        h.setBornTime(System.currentTimeMillis());
        h.setInitMode(0);  // ConsumeInitMode.MIN: a new group starts at the first message
        h.setExpType(expType);
        h.setExp(exp);
        h.setOrder(order);
        h.setAttemptId(attemptId);
        CompletableFuture<PopResult> result = new CompletableFuture<>();
        api.popMessageAsync(brokerName, broker, h, poll + 10_000, new PopCallback() {
            public void onSuccess(PopResult popResult) {
                result.complete(popResult);
            }

            public void onException(Throwable e) {
                result.completeExceptionally(e);
            }
        });
        try {
            return result.get(poll + 15_000, TimeUnit.MILLISECONDS);
        } catch (java.util.concurrent.ExecutionException e) {
            if (e.getCause() instanceof Exception) {
                throw (Exception) e.getCause();
            }
            throw e;
        }
    }

    static PopResult pop(MQClientAPIImpl api, String group, String topic, int queueId, int n, long invisible, long poll)
        throws Exception {
        return pop(api, group, topic, queueId, n, invisible, poll, false, null, "TAG", "*");
    }

    /** Pops (each waiting up to 5 s) until something comes or ``deadlineMs`` passes. */
    static PopResult popUntilFound(MQClientAPIImpl api, String group, String topic, int queueId, int n, long invisible,
                                   boolean order, long deadlineMs) throws Exception {
        long deadline = System.currentTimeMillis() + deadlineMs;
        while (true) {
            PopResult r = pop(api, group, topic, queueId, n, invisible, 5000, order, null, "TAG", "*");
            if (found(r) || System.currentTimeMillis() > deadline) {
                return r;
            }
        }
    }

    static boolean found(PopResult r) {
        return r.getMsgFoundList() != null && !r.getMsgFoundList().isEmpty();
    }

    static List<MessageExt> msgs(PopResult r) {
        return found(r) ? r.getMsgFoundList() : Collections.emptyList();
    }

    static List<String> keys(PopResult r) {
        List<String> out = new ArrayList<>();
        for (MessageExt m : msgs(r)) {
            out.add(m.getKeys());
        }
        return out;
    }

    static List<Integer> attempts(PopResult r) {
        List<Integer> out = new ArrayList<>();
        for (MessageExt m : msgs(r)) {
            out.add(m.getReconsumeTimes());
        }
        return out;
    }

    /** A receipt handle's fields a conforming broker gives the same (not popTime, not the revive queue's number
     * unless FIFO's 999). */
    static List<Object> handle(MessageExt m) {
        String[] x = ExtraInfoUtil.split(m.getProperty(MessageConst.PROPERTY_POP_CK));
        List<Object> out = new ArrayList<>();
        out.add(ExtraInfoUtil.getCkQueueOffset(x));
        out.add(ExtraInfoUtil.getInvisibleTime(x));
        out.add(ExtraInfoUtil.isOrder(x) ? "fifo" : "normal");
        out.add(ExtraInfoUtil.getRetry(x));
        out.add(brokerName.equals(ExtraInfoUtil.getBrokerName(x)));
        out.add(ExtraInfoUtil.getQueueId(x));
        out.add(ExtraInfoUtil.getQueueOffset(x));
        return out;
    }

    static String ackStatus(CompletableFuture<AckResult> f) throws Exception {
        try {
            return String.valueOf(f.get(15, TimeUnit.SECONDS).getStatus());
        } catch (java.util.concurrent.ExecutionException e) {
            return "error: " + e.getCause();
        }
    }

    static AckCallback callback(CompletableFuture<AckResult> f) {
        return new AckCallback() {
            public void onSuccess(AckResult ackResult) {
                f.complete(ackResult);
            }

            public void onException(Throwable e) {
                f.completeExceptionally(e);
            }
        };
    }

    static String ack(MQClientAPIImpl api, String group, String topic, MessageExt m) throws Exception {
        return ack(api, group, topic, m.getProperty(MessageConst.PROPERTY_POP_CK));
    }

    static String ack(MQClientAPIImpl api, String group, String topic, String extraInfo) throws Exception {
        String[] x = ExtraInfoUtil.split(extraInfo);
        AckMessageRequestHeader h = new AckMessageRequestHeader();
        h.setConsumerGroup(group);
        h.setTopic(ExtraInfoUtil.getRealTopic(x, topic, group));
        h.setQueueId(ExtraInfoUtil.getQueueId(x));
        h.setExtraInfo(extraInfo);
        h.setOffset(ExtraInfoUtil.getQueueOffset(x));
        CompletableFuture<AckResult> f = new CompletableFuture<>();
        api.ackMessageAsync(broker, 5000, callback(f), h);
        return ackStatus(f);
    }

    static List<String> ackAll(MQClientAPIImpl api, String group, String topic, PopResult r) throws Exception {
        List<String> out = new ArrayList<>();
        for (MessageExt m : msgs(r)) {
            out.add(ack(api, group, topic, m));
        }
        return out;
    }

    static String batchAck(MQClientAPIImpl api, String group, String topic, List<MessageExt> ms) throws Exception {
        List<String> handles = new ArrayList<>();
        for (MessageExt m : ms) {
            handles.add(m.getProperty(MessageConst.PROPERTY_POP_CK));
        }
        CompletableFuture<AckResult> f = new CompletableFuture<>();
        api.batchAckMessageAsync(broker, 5000, callback(f), topic, group, handles);
        return ackStatus(f);
    }

    static AckResult change(MQClientAPIImpl api, String group, String topic, MessageExt m, long invisible)
        throws Exception {
        String extraInfo = m.getProperty(MessageConst.PROPERTY_POP_CK);
        String[] x = ExtraInfoUtil.split(extraInfo);
        ChangeInvisibleTimeRequestHeader h = new ChangeInvisibleTimeRequestHeader();
        h.setConsumerGroup(group);
        h.setTopic(ExtraInfoUtil.getRealTopic(x, topic, group));
        h.setQueueId(ExtraInfoUtil.getQueueId(x));
        h.setExtraInfo(extraInfo);
        h.setOffset(ExtraInfoUtil.getQueueOffset(x));
        h.setInvisibleTime(invisible);
        CompletableFuture<AckResult> f = new CompletableFuture<>();
        api.changeInvisibleTimeAsync(brokerName, broker, h, 5000, callback(f));
        return f.get(15, TimeUnit.SECONDS);
    }

    static long ms() {
        return System.currentTimeMillis() - T0;
    }

    // -- scenarios ---------------------------------------------------------------------------------------------------

    /** Receive, ack, batch ack, a stale ack, restNum, an empty pop. */
    static void receiveAck() throws Exception {
        String topic = "PopA" + suffix;
        String group = "GA" + suffix;
        createTopic(topic, 1);
        for (int i = 0; i < 4; i++) {
            send(topic, 0, "k" + i, "T", null);
        }
        MQClientAPIImpl api = consumerApi("c1");
        PopResult first = pop(api, group, topic, -1, 3, 10_000, 3000);
        facts.put("first_status", String.valueOf(first.getPopStatus()));
        facts.put("first_keys", keys(first));
        facts.put("first_rest", first.getRestNum());
        facts.put("first_invisible", first.getInvisibleTime());
        List<Object> handles = new ArrayList<>();
        for (MessageExt m : msgs(first)) {
            handles.add(handle(m));
        }
        facts.put("first_handles", handles);
        facts.put("first_topic", msgs(first).isEmpty() ? null : msgs(first).get(0).getTopic());
        facts.put("first_has_1st_pop_time", !msgs(first).isEmpty()
            && String.valueOf(first.getPopTime()).equals(msgs(first).get(0).getProperty(MessageConst.PROPERTY_FIRST_POP_TIME)));
        facts.put("acks", ackAll(api, group, topic, first));
        PopResult second = pop(api, group, topic, -1, 3, 10_000, 3000);
        facts.put("second_keys", keys(second));
        facts.put("second_rest", second.getRestNum());
        facts.put("second_batch_ack", batchAck(api, group, topic, msgs(second)));
        PopResult empty = pop(api, group, topic, -1, 3, 10_000, 1000);
        facts.put("empty_status", String.valueOf(empty.getPopStatus()));
        facts.put("stale_ack", ack(api, group, topic, msgs(first).get(0)));
        send(topic, 0, "k4", "T", null);
        send(topic, 0, "k5", "T", null);
        PopResult third = pop(api, group, topic, -1, 8, 10_000, 3000);
        facts.put("third_keys", keys(third));
        facts.put("third_batch_ack", batchAck(api, group, topic, msgs(third)));
        facts.put("after_all_acked", String.valueOf(pop(api, group, topic, -1, 8, 10_000, 1000).getPopStatus()));
    }

    /** Change invisible time: the message comes back from the retry topic once the new time is over. */
    static void changeInvisible() throws Exception {
        String topic = "PopC" + suffix;
        String group = "GC" + suffix;
        createTopic(topic, 1);
        send(topic, 0, "c0", "T", null);
        send(topic, 0, "c1", "T", null);
        MQClientAPIImpl api = consumerApi("c1");
        PopResult r = pop(api, group, topic, -1, 2, 60_000, 3000);
        facts.put("popped", keys(r));
        MessageExt c0 = msgs(r).get(0);
        AckResult changed = change(api, group, topic, c0, 1000);
        long changedAt = ms();
        facts.put("change_status", String.valueOf(changed.getStatus()));
        String[] nx = ExtraInfoUtil.split(changed.getExtraInfo());
        facts.put("new_handle", List.of(ExtraInfoUtil.getCkQueueOffset(nx), ExtraInfoUtil.getInvisibleTime(nx),
            ExtraInfoUtil.getRetry(nx), ExtraInfoUtil.getQueueOffset(nx)));
        facts.put("ack_other", ack(api, group, topic, msgs(r).get(1)));
        PopResult back = popUntilFound(api, group, topic, -1, 2, 60_000, false, 30_000);
        info.put("back_after_change_ms", ms() - changedAt);
        facts.put("back_keys", keys(back));
        facts.put("back_attempts", attempts(back));
        List<Object> handles = new ArrayList<>();
        for (MessageExt m : msgs(back)) {
            handles.add(handle(m));
            facts.put("back_topic", m.getTopic());
        }
        facts.put("back_handles", handles);
        facts.put("back_ack", ackAll(api, group, topic, back));
        facts.put("then", String.valueOf(pop(api, group, topic, -1, 2, 60_000, 2000).getPopStatus()));
    }

    /** Not acked: back after each invisible time with its attempts counted, 1ST_POP_TIME kept. */
    static void expiryAttempts() throws Exception {
        String topic = "PopE" + suffix;
        String group = "GE" + suffix;
        createTopic(topic, 1);
        send(topic, 0, "e0", "T", null);
        MQClientAPIImpl api = consumerApi("c1");
        PopResult r = pop(api, group, topic, -1, 1, 1000, 3000);
        long firstPop = r.getPopTime();
        List<Integer> seen = new ArrayList<>(attempts(r));
        List<Boolean> firstPopTimeKept = new ArrayList<>();
        List<Long> delays = new ArrayList<>();
        MessageExt last = null;
        for (int round = 0; round < 2; round++) {
            long due = (last == null ? firstPop : Long.parseLong(ExtraInfoUtil.split(
                last.getProperty(MessageConst.PROPERTY_POP_CK))[1])) + 1000;
            PopResult back = popUntilFound(api, group, topic, -1, 1, 1000, false, 30_000);
            delays.add(back.getPopTime() - due);
            seen.addAll(attempts(back));
            for (MessageExt m : msgs(back)) {
                firstPopTimeKept.add(String.valueOf(firstPop).equals(m.getProperty(MessageConst.PROPERTY_FIRST_POP_TIME)));
                last = m;
            }
        }
        facts.put("attempts", seen);
        facts.put("first_pop_time_kept", firstPopTimeKept);
        facts.put("ack", last == null ? null : ack(api, group, topic, last));
        facts.put("then", String.valueOf(pop(api, group, topic, -1, 1, 1000, 3000).getPopStatus()));
        info.put("redelivered_ms_after_due", delays);
    }

    /** retryMaxTimes 2: the third delivery is sent to %DLQ%<group> (CONSUMER_SEND_MSG_BACK, delayLevel -1) and
     * acked, as the 5.x proxy does; the DLQ holds it. */
    static void retryDlq() throws Exception {
        String topic = "PopD" + suffix;
        String group = "GD" + suffix;
        createTopic(topic, 1);
        createGroup(group, false, 2);
        send(topic, 0, "d0", "T", null);
        MQClientAPIImpl api = consumerApi("c1");
        List<Integer> seen = new ArrayList<>();
        long deadline = System.currentTimeMillis() + 60_000;
        while (System.currentTimeMillis() < deadline) {
            PopResult r = popUntilFound(api, group, topic, -1, 1, 1000, false, 30_000);
            MessageExt m = msgs(r).isEmpty() ? null : msgs(r).get(0);
            if (m == null) {
                continue;
            }
            seen.add(m.getReconsumeTimes());
            if (m.getReconsumeTimes() >= 2) {
                api.consumerSendMessageBack(broker, brokerName, m, group, -1, 5000, 2);
                facts.put("sent_back", "OK");
                facts.put("ack_after_dlq", ack(api, group, topic, m));
                break;
            }
        }
        facts.put("attempts", seen);
        facts.put("then", String.valueOf(pop(api, group, topic, -1, 1, 1000, 3000).getPopStatus()));
        DefaultMQPullConsumer puller = new DefaultMQPullConsumer("PULLDLQ" + suffix);
        puller.setNamesrvAddr(ns);
        puller.setInstanceName("dlq-" + suffix);
        puller.start();
        List<String> dlq = new ArrayList<>();
        long until = System.currentTimeMillis() + 15_000;
        while (dlq.isEmpty() && System.currentTimeMillis() < until) {
            try {
                PullResult pr = puller.pull(new MessageQueue("%DLQ%" + group, brokerName, 0), "*", 0, 32, 5000);
                if (pr.getMsgFoundList() != null) {
                    for (MessageExt m : pr.getMsgFoundList()) {
                        dlq.add(m.getKeys() + ":" + new String(m.getBody(), StandardCharsets.UTF_8));
                    }
                }
            } catch (Exception e) {
                info.put("dlq_pull_error", String.valueOf(e));
            }
            if (dlq.isEmpty()) {
                Thread.sleep(200);
            }
        }
        facts.put("dlq", dlq);
    }

    /** A FIFO group (consumeMessageOrderly): a queue's next messages only once its batch is acked or visible again;
     * three consumers; per message group (one queue each) in send order; attempts counted. */
    static void fifo() throws Exception {
        String topic = "FifoT" + suffix;
        String group = "GF" + suffix;
        createTopic(topic, 2);
        createGroup(group, true, 16);
        String[][] groups = {{"A", "0"}, {"B", "1"}, {"C", "0"}};
        for (int i = 0; i < 4; i++) {
            for (String[] g : groups) {
                send(topic, Integer.parseInt(g[1]), g[0] + i, g[0], null);
            }
        }
        MQClientAPIImpl c1 = consumerApi("c1");
        MQClientAPIImpl c2 = consumerApi("c2");
        MQClientAPIImpl c3 = consumerApi("c3");
        PopResult a = pop(c1, group, topic, 0, 2, 10_000, 1000, true, "a1", "TAG", "*");
        facts.put("c1_q0", keys(a));
        facts.put("c1_q0_handle", msgs(a).isEmpty() ? null : handle(msgs(a).get(0)));
        PopResult blocked = pop(c2, group, topic, 0, 2, 10_000, 500, true, "a2", "TAG", "*");
        facts.put("c2_q0_while_c1_holds_it", String.valueOf(blocked.getPopStatus()));
        PopResult b = pop(c3, group, topic, 1, 2, 10_000, 1000, true, "a3", "TAG", "*");
        facts.put("c3_q1", keys(b));
        facts.put("c1_acks", ackAll(c1, group, topic, a));
        facts.put("c3_acks", ackAll(c3, group, topic, b));
        PopResult next = pop(c2, group, topic, 0, 2, 10_000, 1000, true, "a4", "TAG", "*");
        facts.put("c2_q0_after_the_acks", keys(next));
        facts.put("c2_acks", ackAll(c2, group, topic, next));
        Map<String, List<String>> order = new TreeMap<>();
        for (PopResult r : List.of(a, b, next)) {
            for (String k : keys(r)) {
                order.computeIfAbsent(k.substring(0, 1), x -> new ArrayList<>()).add(k);
            }
        }
        MQClientAPIImpl[] all = {c1, c2, c3};
        int total = 6;
        int idle = 0;
        int turn = 0;
        while (idle < 3) {
            MQClientAPIImpl c = all[turn++ % 3];
            PopResult r = pop(c, group, topic, -1, 2, 10_000, 1000, true, "d" + turn, "TAG", "*");
            if (!found(r)) {
                idle++;
                continue;
            }
            idle = 0;
            for (String k : keys(r)) {
                order.computeIfAbsent(k.substring(0, 1), x -> new ArrayList<>()).add(k);
                total++;
            }
            ackAll(c, group, topic, r);
        }
        facts.put("order_per_message_group", order);
        facts.put("received", total);
        // attempts: a batch not acked comes back whole after its invisible time, each message's attempt counted
        send(topic, 1, "D0", "D", null);
        send(topic, 1, "D1", "D", null);
        PopResult d = pop(c1, group, topic, 1, 2, 2000, 1000, true, "e1", "TAG", "*");
        facts.put("d_first", keys(d));
        facts.put("d_first_attempts", attempts(d));
        facts.put("d_held", String.valueOf(pop(c2, group, topic, 1, 2, 2000, 300, true, "e2", "TAG", "*").getPopStatus()));
        long popped = d.getPopTime();
        PopResult again = popUntilFound(c2, group, topic, 1, 2, 10_000, true, 30_000);
        info.put("fifo_back_ms_after_due", again.getPopTime() - popped - 2000);
        facts.put("d_again", keys(again));
        facts.put("d_again_attempts", attempts(again));
        facts.put("d_again_acks", ackAll(c2, group, topic, again));
        facts.put("d_then", String.valueOf(pop(c3, group, topic, 1, 2, 2000, 1000, true, "e3", "TAG", "*").getPopStatus()));
    }

    /** Eight consumers on a one-queue topic, popping at the same time round after round: each receives, none twice. */
    static void eight() throws Exception {
        String topic = "PopOne" + suffix;
        String group = "G8" + suffix;
        createTopic(topic, 1);
        for (int i = 0; i < 64; i++) {
            send(topic, 0, "m" + i, "T", null);
        }
        MQClientAPIImpl[] apis = new MQClientAPIImpl[8];
        for (int i = 0; i < 8; i++) {
            apis[i] = consumerApi("e" + i);
        }
        Map<String, Integer> seen = new ConcurrentHashMap<>();
        int[] perConsumer = new int[8];
        AtomicInteger rounds = new AtomicInteger();
        CyclicBarrier barrier = new CyclicBarrier(8, rounds::incrementAndGet);
        List<Throwable> errors = new CopyOnWriteArrayList<>();
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < 8; i++) {
            final int me = i;
            Thread t = new Thread(() -> {
                try {
                    for (int round = 0; round < 16; round++) {
                        barrier.await(60, TimeUnit.SECONDS);
                        if (seen.size() >= 64) {
                            break;  // every thread sees the same count here: the last round's acks are done
                        }
                        PopResult r = pop(apis[me], group, topic, -1, 4, 60_000, 2000);
                        for (MessageExt m : msgs(r)) {
                            seen.merge(m.getKeys(), 1, Integer::sum);
                            perConsumer[me]++;
                        }
                        ackAll(apis[me], group, topic, r);
                    }
                } catch (Throwable e) {
                    errors.add(e);
                }
            });
            threads.add(t);
            t.start();
        }
        for (Thread t : threads) {
            t.join(180_000);
        }
        if (!errors.isEmpty()) {
            throw new RuntimeException(errors.get(0));
        }
        int twice = 0;
        for (int n : seen.values()) {
            if (n > 1) {
                twice++;
            }
        }
        int receiving = 0;
        for (int n : perConsumer) {
            if (n > 0) {
                receiving++;
            }
        }
        facts.put("received", seen.size());
        facts.put("received_twice", twice);
        facts.put("consumers_receiving", receiving);
        List<Integer> counts = new ArrayList<>();
        for (int n : perConsumer) {
            counts.add(n);
        }
        info.put("per_consumer", counts);
    }

    /** TAG and SQL92 expressions; messages the filter does not take are passed over for good. */
    static void filters() throws Exception {
        String topic = "FiltT" + suffix;
        createTopic(topic, 1);
        String[] tags = {"A", "B", "C", "A", "B"};
        for (int i = 1; i <= 5; i++) {
            send(topic, 0, "f" + i, tags[i - 1], Map.of("a", String.valueOf(i)));
        }
        MQClientAPIImpl api = consumerApi("c1");
        String gtag = "GTAG" + suffix;
        PopResult byTag = pop(api, gtag, topic, -1, 32, 60_000, 3000, false, null, "TAG", "A || C");
        facts.put("tag", keys(byTag));
        facts.put("tag_acks", ackAll(api, gtag, topic, byTag));
        facts.put("tag_then", String.valueOf(pop(api, gtag, topic, -1, 32, 60_000, 500, false, null, "TAG", "A || C")
            .getPopStatus()));
        String gsql = "GSQL" + suffix;
        PopResult bySql = pop(api, gsql, topic, -1, 32, 60_000, 3000, false, null, "SQL92", "a > 3");
        facts.put("sql", keys(bySql));
        facts.put("sql_acks", ackAll(api, gsql, topic, bySql));
        try {
            pop(api, "GBAD" + suffix, topic, -1, 32, 60_000, 500, false, null, "SQL92", "a >");
            facts.put("bad_sql", "accepted");
        } catch (MQBrokerException e) {
            facts.put("bad_sql", e.getResponseCode());
        }
    }

    static DefaultMQPushConsumer pushConsumer(String group, String topic, String expression, String instance)
        throws Exception {
        DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
        c.setNamesrvAddr(ns);
        c.setInstanceName(instance + "-" + suffix);
        c.setClientRebalance(false);
        c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
        c.subscribe(topic, expression);
        return c;
    }

    @SuppressWarnings("unchecked")
    static Set<Integer> popQueues(DefaultMQPushConsumer c, String topic) throws Exception {
        RebalanceImpl rebalance = c.getDefaultMQPushConsumerImpl().getRebalanceImpl();
        Field f = RebalanceImpl.class.getDeclaredField("popProcessQueueTable");
        f.setAccessible(true);
        Set<Integer> out = new HashSet<>();
        for (MessageQueue mq : ((Map<MessageQueue, Object>) f.get(rebalance)).keySet()) {
            if (mq.getTopic().equals(topic)) {
                out.add(mq.getQueueId());
            }
        }
        return out;
    }

    static void waitPopQueues(List<DefaultMQPushConsumer> cs, String topic) throws Exception {
        long deadline = System.currentTimeMillis() + 60_000;
        for (DefaultMQPushConsumer c : cs) {
            while (popQueues(c, topic).isEmpty()) {
                if (System.currentTimeMillis() > deadline) {
                    throw new IllegalStateException("no POP assignment of " + topic + " after 60 s");
                }
                Thread.sleep(100);
            }
        }
    }

    /** DefaultMQPushConsumer in POP mode (client rebalance off, request mode POP): the backlog and a message given
     * back with RECONSUME_LATER (changeInvisibleTime to popDelayLevel 10 s), which comes back with its attempt. */
    static void push() throws Exception {
        String topic = "PushT" + suffix;
        String group = "GP" + suffix;
        createTopic(topic, 2);
        createGroup(group, false, 16);
        admin.setMessageRequestMode(broker, topic, group, MessageRequestMode.POP, 0, 5000);
        List<String> got = new CopyOnWriteArrayList<>();
        Map<String, Long> firstSeen = new ConcurrentHashMap<>();
        List<Boolean> handles = new CopyOnWriteArrayList<>();
        DefaultMQPushConsumer c = pushConsumer(group, topic, "*", "push");
        c.setPopInvisibleTime(10_000);
        c.setPopBatchNums(8);
        c.registerMessageListener((MessageListenerConcurrently) (list, ctx) -> {
            for (MessageExt m : list) {
                got.add(m.getKeys() + "@" + m.getReconsumeTimes());
                handles.add(m.getProperty(MessageConst.PROPERTY_POP_CK) != null);
                if (m.getKeys().equals("p0") && m.getReconsumeTimes() == 0) {
                    firstSeen.put("p0", System.currentTimeMillis());
                    return ConsumeConcurrentlyStatus.RECONSUME_LATER;
                }
                if (m.getKeys().equals("p0")) {
                    info.put("p0_back_ms", System.currentTimeMillis() - firstSeen.get("p0"));
                }
            }
            return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
        });
        c.start();
        waitPopQueues(List.of(c), topic);
        facts.put("assigned_queue_ids", new ArrayList<>(popQueues(c, topic)));
        for (int i = 0; i < 6; i++) {
            send(topic, i % 2, "p" + i, "T", null);
        }
        long deadline = System.currentTimeMillis() + 60_000;
        while (!got.contains("p0@1") || new HashSet<>(got).size() < 7) {
            if (System.currentTimeMillis() > deadline) {
                break;
            }
            Thread.sleep(100);
        }
        Thread.sleep(1000);  // nothing more may come
        List<String> sorted = new ArrayList<>(got);
        Collections.sort(sorted);
        facts.put("deliveries", sorted);
        facts.put("all_with_pop_ck", !handles.contains(false));
        c.shutdown();
    }

    /** Eight push consumers in POP mode on a one-queue topic, subscribed to tag A, one message at a time: each
     * receives, none twice, no B. */
    static void pushEight() throws Exception {
        String topic = "Push8" + suffix;
        String group = "GP8" + suffix;
        createTopic(topic, 1);
        createGroup(group, false, 16);
        admin.setMessageRequestMode(broker, topic, group, MessageRequestMode.POP, 0, 5000);
        Map<String, Integer> seen = new ConcurrentHashMap<>();
        Map<Integer, Integer> per = new ConcurrentHashMap<>();
        List<DefaultMQPushConsumer> cs = new ArrayList<>();
        for (int i = 0; i < 8; i++) {
            final int me = i;
            DefaultMQPushConsumer c = pushConsumer(group, topic, "A", "p8-" + i);
            c.setPopInvisibleTime(30_000);
            c.setPopBatchNums(1);
            c.setPopThresholdForQueue(1);
            c.setConsumeThreadMin(1);
            c.setConsumeThreadMax(1);
            c.registerMessageListener((MessageListenerConcurrently) (list, ctx) -> {
                for (MessageExt m : list) {
                    seen.merge(m.getKeys(), 1, Integer::sum);
                    per.merge(me, 1, Integer::sum);
                }
                try {
                    Thread.sleep(200);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            c.start();
            cs.add(c);
        }
        waitPopQueues(cs, topic);
        for (int i = 0; i < 64; i++) {
            send(topic, 0, "m" + i, i % 2 == 0 ? "A" : "B", null);
        }
        long deadline = System.currentTimeMillis() + 60_000;
        while (seen.size() < 32 && System.currentTimeMillis() < deadline) {
            Thread.sleep(100);
        }
        Thread.sleep(1000);
        int twice = 0;
        int b = 0;
        for (Map.Entry<String, Integer> e : seen.entrySet()) {
            if (e.getValue() > 1) {
                twice++;
            }
            if (Integer.parseInt(e.getKey().substring(1)) % 2 == 1) {
                b++;
            }
        }
        facts.put("received", seen.size());
        facts.put("received_twice", twice);
        facts.put("received_b", b);
        facts.put("consumers_receiving", per.size());
        List<Integer> counts = new ArrayList<>();
        for (int i = 0; i < 8; i++) {
            counts.add(per.getOrDefault(i, 0));
        }
        info.put("per_consumer", counts);
        for (DefaultMQPushConsumer c : cs) {
            c.shutdown();
        }
    }
}
