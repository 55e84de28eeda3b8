// The load generator of bench/peers.py, on the official RocketMQ Java client 4.9.8: the same program drives pyrmq
// and the Apache RocketMQ Java broker, so the broker is what is measured. 1 KiB bodies. Prints JSON lines:
// {"phase":"start"} once warmed up and about to time, then {"mode":..,"count":..,"seconds":..,"errors":..}.
//
//   PeersLoad topics  <namesrv> <brokerAddr> <queues> <topic>...   create the topics (read/write queues, perm 6)
//   PeersLoad sync    <namesrv> <topic> <count>                    one send in flight
//   PeersLoad async   <namesrv> <topic> <count> <inFlight>         send with callback, a window of <inFlight>
//   PeersLoad batch   <namesrv> <topic> <count> <perBatch>         send(List) of <perBatch>, one in flight
//   PeersLoad consume <namesrv> <group> <topic> <count>            DefaultMQPushConsumer from the first offset
//                                                                  (default threads and pull batch) until <count>

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendCallback;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

public class PeersLoad {
    static final byte[] BODY = new byte[1024];
    static final int WARM_UP = 2000;

    static {
        Arrays.fill(BODY, (byte) 'x');
    }

    static void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    static void result(String mode, long count, long nanos, long errors) {
        emit(String.format("{\"mode\":\"%s\",\"count\":%d,\"seconds\":%.6f,\"errors\":%d}", mode, count, nanos / 1e9, errors));
    }

    static DefaultMQProducer producer(String namesrv) throws Exception {
        DefaultMQProducer p = new DefaultMQProducer("peers_load_producer");
        p.setNamesrvAddr(namesrv);
        p.setInstanceName("peers-" + System.nanoTime());
        p.setSendMsgTimeout(30000);
        p.start();
        return p;
    }

    static void warmUp(DefaultMQProducer p, String topic) throws Exception {
        for (int i = 0; i < WARM_UP; i += 100) {
            List<Message> batch = new ArrayList<>();
            for (int j = 0; j < 100; j++) {
                batch.add(new Message(topic + "Warm", BODY));
            }
            p.send(batch);
        }
        for (int i = 0; i < 200; i++) {
            p.send(new Message(topic + "Warm", BODY));
        }
        emit("{\"phase\":\"start\"}");
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        String namesrv = args[1];
        switch (mode) {
            case "topics": {
                DefaultMQAdminExt admin = new DefaultMQAdminExt();
                admin.setNamesrvAddr(namesrv);
                admin.setInstanceName("peers-admin-" + System.nanoTime());
                admin.start();
                int queues = Integer.parseInt(args[3]);
                for (int i = 4; i < args.length; i++) {
                    admin.createAndUpdateTopicConfig(args[2], new TopicConfig(args[i], queues, queues, 6));
                    admin.createAndUpdateTopicConfig(args[2], new TopicConfig(args[i] + "Warm", queues, queues, 6));
                }
                admin.shutdown();
                emit("{\"mode\":\"topics\"}");
                break;
            }
            case "sync": {
                String topic = args[2];
                long count = Long.parseLong(args[3]);
                DefaultMQProducer p = producer(namesrv);
                warmUp(p, topic);
                long errors = 0;
                long t0 = System.nanoTime();
                for (long i = 0; i < count; i++) {
                    if (p.send(new Message(topic, BODY)).getSendStatus() != SendStatus.SEND_OK) {
                        errors++;
                    }
                }
                result(mode, count, System.nanoTime() - t0, errors);
                p.shutdown();
                break;
            }
            case "async": {
                String topic = args[2];
                long count = Long.parseLong(args[3]);
                int window = Integer.parseInt(args[4]);
                DefaultMQProducer p = producer(namesrv);
                warmUp(p, topic);
                Semaphore room = new Semaphore(window);
                CountDownLatch done = new CountDownLatch((int) count);
                AtomicLong errors = new AtomicLong();
                SendCallback cb = new SendCallback() {
                    public void onSuccess(SendResult r) {
                        room.release();
                        done.countDown();
                    }

                    public void onException(Throwable e) {
                        errors.incrementAndGet();
                        room.release();
                        done.countDown();
                    }
                };
                long t0 = System.nanoTime();
                for (long i = 0; i < count; i++) {
                    room.acquire();
                    p.send(new Message(topic, BODY), cb, 30000);
                }
                done.await();
                result(mode, count, System.nanoTime() - t0, errors.get());
                p.shutdown();
                break;
            }
            case "batch": {
                String topic = args[2];
                long count = Long.parseLong(args[3]);
                int per = Integer.parseInt(args[4]);
                DefaultMQProducer p = producer(namesrv);
                warmUp(p, topic);
                long errors = 0;
                long t0 = System.nanoTime();
                for (long sent = 0; sent < count; sent += per) {
                    List<Message> batch = new ArrayList<>(per);
                    for (int j = 0; j < per && sent + j < count; j++) {
                        batch.add(new Message(topic, BODY));
                    }
                    if (p.send(batch).getSendStatus() != SendStatus.SEND_OK) {
                        errors += batch.size();
                    }
                }
                result(mode, count, System.nanoTime() - t0, errors);
                p.shutdown();
                break;
            }
            case "consume": {
                String group = args[2];
                String topic = args[3];
                long count = Long.parseLong(args[4]);
                CountDownLatch done = new CountDownLatch((int) count);
                DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
                c.setNamesrvAddr(namesrv);
                c.setInstanceName("peers-consumer-" + System.nanoTime());
                c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
                c.subscribe(topic, "*");
                c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                    for (int i = 0; i < msgs.size(); i++) {
                        done.countDown();
                    }
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                });
                emit("{\"phase\":\"start\"}");
                long t0 = System.nanoTime();
                c.start();
                boolean all = done.await(1800, TimeUnit.SECONDS);
                long nanos = System.nanoTime() - t0;
                result(mode, count - done.getCount(), nanos, all ? 0 : done.getCount());
                c.shutdown();
                break;
            }
            default:
                throw new IllegalArgumentException("unknown mode " + mode);
        }
        System.exit(0);
    }
}
