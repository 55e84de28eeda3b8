// The load generator of bench/pop_peers.py, on the official RocketMQ 5.5.0 Java remoting client: the same program
// drives pyrmq and the Apache RocketMQ 5.5.0 broker, so the broker is what is measured. 1 KiB bodies. Prints JSON
// lines: {"phase":"start"} once warmed up (WARM_UP messages consumed) and about to time, then
// {"mode":..,"count":..,"seconds":..,"errors":..}.
//
//   PopLoad topics  <namesrv> <brokerAddr> <queues> <topic>...     create the topics (read/write queues, perm 6)
//   PopLoad store   <namesrv> <topic> <count>                      send(List) of 100, one in flight
//   PopLoad pop     <namesrv> <brokerAddr> <group> <topic> <count> <poppers>
//                   raw POP: <poppers> threads, each its own client instance, POP_MESSAGE of 32 (queueId -1,
//                   invisible 60 s, long polling 1 s) then one BATCH_ACK_MESSAGE of the answer (async), until
//                   WARM_UP + <count> messages are acked
//   PopLoad pushpop <namesrv> <brokerAddr> <group> <topic> <count>
//                   DefaultMQPushConsumer in POP mode (setClientRebalance(false), request mode POP set first; pop 32,
//                   one ACK_MESSAGE per message as the 5.5.0 client does) until WARM_UP + <count> are consumed
//   PopLoad pull    <namesrv> <group> <topic> <count>              DefaultMQPushConsumer (classic: queues rebalanced,
//                                                                  pulls of 32) until WARM_UP + <count>

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.consumer.AckCallback;
import org.apache.rocketmq.client.consumer.AckResult;
import org.apache.rocketmq.client.consumer.AckStatus;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PopCallback;
import org.apache.rocketmq.client.consumer.PopResult;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.impl.MQClientAPIImpl;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageRequestMode;
import org.apache.rocketmq.remoting.protocol.body.ClusterInfo;
import org.apache.rocketmq.remoting.protocol.header.PopMessageRequestHeader;
import org.apache.rocketmq.remoting.protocol.route.BrokerData;
import org.apache.rocketmq.remoting.protocol.subscription.SubscriptionGroupConfig;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

public class PopLoad {
    static final byte[] BODY = new byte[1024];
    static final int WARM_UP = 5000;

    static {
        Arrays.fill(BODY, (byte) 'x');
    }

    static void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    static void result(String mode, long count, long nanos, long errors) {
        emit(String.format("{\"mode\":\"%s\",\"count\":%d,\"seconds\":%.6f,\"errors\":%d}", mode, count, nanos / 1e9,
            errors));
    }

    static DefaultMQAdminExt admin(String namesrv) throws Exception {
        DefaultMQAdminExt admin = new DefaultMQAdminExt();
        admin.setNamesrvAddr(namesrv);
        admin.setInstanceName("pop-load-admin-" + System.nanoTime());
        admin.start();
        return admin;
    }

    static String brokerName(DefaultMQAdminExt admin, String brokerAddr) throws Exception {
        ClusterInfo cluster = admin.examineBrokerClusterInfo();
        for (BrokerData bd : cluster.getBrokerAddrTable().values()) {
            if (brokerAddr.equals(bd.getBrokerAddrs().get(0L))) {
                return bd.getBrokerName();
            }
        }
        throw new IllegalStateException("no broker registered at " + brokerAddr);
    }

    /** Starts the clock once ``warm`` messages are done; ``done`` counts down the timed ones. */
    static final class Clock {
        final long warm;
        final long total;
        final AtomicLong seen = new AtomicLong();
        final AtomicBoolean started = new AtomicBoolean();
        final CountDownLatch done = new CountDownLatch(1);
        volatile long t0;
        volatile long t1;

        Clock(long warm, long count) {
            this.warm = warm;
            this.total = warm + count;
        }

        void add(long n) {
            long now = seen.addAndGet(n);
            if (now >= warm && started.compareAndSet(false, true)) {
                emit("{\"phase\":\"start\"}");
                t0 = System.nanoTime();
            }
            if (now >= total && t1 == 0) {
                t1 = System.nanoTime();
                done.countDown();
            }
        }

        long timed() {
            return Math.min(seen.get(), total) - warm;
        }
    }

    public static void main(String[] args) {
        try {
            run(args);
        } catch (Throwable e) {
            e.printStackTrace();
            Runtime.getRuntime().halt(1);  // the client threads would keep the JVM alive
        }
        System.exit(0);
    }

    static void run(String[] args) throws Exception {
        String mode = args[0];
        String namesrv = args[1];
        switch (mode) {
            case "topics": {
                DefaultMQAdminExt admin = admin(namesrv);
                int queues = Integer.parseInt(args[3]);
                for (int i = 4; i < args.length; i++) {
                    admin.createAndUpdateTopicConfig(args[2], new TopicConfig(args[i], queues, queues, 6));
                }
                for (int i = 4; i < args.length; i++) {  // until the name server routes each topic
                    long deadline = System.currentTimeMillis() + 60_000;
                    while (true) {
                        try {
                            if (!admin.examineTopicRouteInfo(args[i]).getQueueDatas().isEmpty()) {
                                break;
                            }
                        } catch (Exception e) {
                            // not routed yet
                        }
                        if (System.currentTimeMillis() > deadline) {
                            throw new IllegalStateException("topic " + args[i] + " not routed");
                        }
                        Thread.sleep(100);
                    }
                }
                admin.shutdown();
                result(mode, 0, 0, 0);
                break;
            }
            case "store": {
                String topic = args[2];
                long count = Long.parseLong(args[3]);
                DefaultMQProducer p = new DefaultMQProducer("pop_load_producer");
                p.setNamesrvAddr(namesrv);
                p.setInstanceName("pop-load-" + System.nanoTime());
                p.setSendMsgTimeout(30000);
                p.start();
                long errors = 0;
                long t0 = System.nanoTime();
                for (long sent = 0; sent < count; sent += 100) {
                    List<Message> batch = new ArrayList<>();
                    for (int j = 0; j < 100 && sent + j < count; j++) {
                        batch.add(new Message(topic, "T", BODY));
                    }
                    SendResult r = p.send(batch);
                    if (r.getSendStatus() != SendStatus.SEND_OK) {
                        errors += batch.size();
                    }
                }
                result(mode, count, System.nanoTime() - t0, errors);
                p.shutdown();
                break;
            }
            case "pop": {
                String brokerAddr = args[2];
                String group = args[3];
                String topic = args[4];
                long count = Long.parseLong(args[5]);
                int poppers = Integer.parseInt(args[6]);
                DefaultMQAdminExt admin = admin(namesrv);
                String brokerName = brokerName(admin, brokerAddr);
                Clock clock = new Clock(WARM_UP, count);
                AtomicLong errors = new AtomicLong();
                List<Thread> threads = new ArrayList<>();
                for (int i = 0; i < poppers; i++) {
                    DefaultMQProducer carrier = new DefaultMQProducer("pop_load_carrier");
                    carrier.setNamesrvAddr(namesrv);
                    carrier.setInstanceName("pop-load-" + i + "-" + System.nanoTime());
                    carrier.start();
                    MQClientAPIImpl api = carrier.getDefaultMQProducerImpl().getMqClientFactory().getMQClientAPIImpl();
                    Thread t = new Thread(() -> {
                        try {
                            while (clock.done.getCount() > 0) {
                                List<MessageExt> msgs = pop(api, brokerName, brokerAddr, group, topic);
                                if (msgs.isEmpty()) {
                                    continue;
                                }
                                List<String> handles = new ArrayList<>(msgs.size());
                                for (MessageExt m : msgs) {
                                    handles.add(m.getProperty(MessageConst.PROPERTY_POP_CK));
                                }
                                int n = handles.size();
                                api.batchAckMessageAsync(brokerAddr, 30_000, new AckCallback() {
                                    public void onSuccess(AckResult ackResult) {
                                        if (ackResult.getStatus() == AckStatus.OK) {
                                            clock.add(n);
                                        } else {
                                            errors.addAndGet(n);
                                        }
                                    }

                                    public void onException(Throwable e) {
                                        errors.addAndGet(n);
                                    }
                                }, topic, group, handles);
                            }
                        } catch (Exception e) {
                            e.printStackTrace();
                            errors.incrementAndGet();
                            clock.done.countDown();
                        }
                    });
                    threads.add(t);
                }
                for (Thread t : threads) {
                    t.start();
                }
                boolean all = clock.done.await(900, TimeUnit.SECONDS);
                result(mode, clock.timed(), clock.t1 - clock.t0, all ? errors.get() : errors.get() + 1);
                break;
            }
            case "pushpop":
            case "pull": {
                boolean pop = mode.equals("pushpop");
                int at = pop ? 3 : 2;
                String group = args[at];
                String topic = args[at + 1];
                long count = Long.parseLong(args[at + 2]);
                if (pop) {  // the group first: SET_MESSAGE_REQUEST_MODE needs it (as mqadmin setConsumeMode does)
                    DefaultMQAdminExt admin = admin(namesrv);
                    SubscriptionGroupConfig config = new SubscriptionGroupConfig();
                    config.setGroupName(group);
                    admin.createAndUpdateSubscriptionGroupConfig(args[2], config);
                    admin.setMessageRequestMode(args[2], topic, group, MessageRequestMode.POP, 0, 5000);
                    admin.shutdown();
                }
                Clock clock = new Clock(WARM_UP, count);
                DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
                c.setNamesrvAddr(namesrv);
                c.setInstanceName("pop-load-consumer-" + System.nanoTime());
                c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
                if (pop) {
                    c.setClientRebalance(false);
                    c.setPopBatchNums(32);
                    c.setPopInvisibleTime(60_000);
                }
                c.subscribe(topic, "*");
                c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                    clock.add(msgs.size());
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                });
                c.start();
                boolean all = clock.done.await(900, TimeUnit.SECONDS);
                result(mode, clock.timed(), clock.t1 - clock.t0, all ? 0 : 1);
                c.shutdown();
                break;
            }
            default:
                throw new IllegalArgumentException("unknown mode " + mode);
        }
    }

    static List<MessageExt> pop(MQClientAPIImpl api, String brokerName, String brokerAddr, String group, String topic)
        throws Exception {
        PopMessageRequestHeader h = new PopMessageRequestHeader();
        h.setConsumerGroup(group);
        h.setTopic(topic);
        h.setQueueId(-1);
        h.setMaxMsgNums(32);
        h.setInvisibleTime(60_000);
        h.setPollTime(1000);
        h.setBornTime(System.currentTimeMillis());
        h.setInitMode(0);
        h.setExpType("TAG");
        h.setExp("*");
        CompletableFuture<PopResult> f = new CompletableFuture<>();
        api.popMessageAsync(brokerName, brokerAddr, h, 15_000, new PopCallback() {
            public void onSuccess(PopResult popResult) {
                f.complete(popResult);
            }

            public void onException(Throwable e) {
                f.completeExceptionally(e);
            }
        });
        PopResult r = f.get(20, TimeUnit.SECONDS);
        return r.getMsgFoundList() == null ? List.of() : r.getMsgFoundList();
    }
}
