// The official RocketMQ 4.9.8 Java client signing with AclClientRPCHook against a broker with ACL on.
//   AclPeer produce NAMESRV TOPIC COUNT AK SK          -> {"status":"SEND_OK",...} per message, or {"error":..,"code":..}
//   AclPeer consume NAMESRV TOPIC GROUP COUNT MILLIS AK SK -> {"body":...} per message, then {"received":n}
//   AclPeer pull NAMESRV TOPIC GROUP AK SK             -> {"found":n} or {"error":..,"code":..}
//   AclPeer createtopic NAMESRV BROKER TOPIC AK SK     -> {"created":topic} or {"error":..,"code":..}
// AK "-" means no credentials (no RPC hook). Prints one JSON object per line; exits 0 unless the arguments are wrong.
import java.nio.charset.StandardCharsets;
import java.util.Set;
import java.util.concurrent.ConcurrentLinkedQueue;

import org.apache.rocketmq.acl.common.AclClientRPCHook;
import org.apache.rocketmq.acl.common.SessionCredentials;
import org.apache.rocketmq.client.consumer.DefaultMQPullConsumer;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.PullResult;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.consumer.rebalance.AllocateMessageQueueAveragely;
import org.apache.rocketmq.client.exception.MQBrokerException;
import org.apache.rocketmq.client.exception.MQClientException;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.TopicConfig;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageQueue;
import org.apache.rocketmq.remoting.RPCHook;
import org.apache.rocketmq.tools.admin.DefaultMQAdminExt;

public class AclPeer {
    static String q(String s) {
        if (s == null) return "null";
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c == '"' || c == '\\') b.append('\\').append(c);
            else if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
            else b.append(c);
        }
        return b.append('"').toString();
    }

    static RPCHook hook(String ak, String sk) {
        return "-".equals(ak) ? null : new AclClientRPCHook(new SessionCredentials(ak, sk));
    }

    static void error(Throwable e) {
        // the whole cause chain: the producer wraps the broker's MQBrokerException (code and remark) in its own
        int code = -1;
        StringBuilder text = new StringBuilder();
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (code < 0 && t instanceof MQBrokerException) code = ((MQBrokerException) t).getResponseCode();
            if (code < 0 && t instanceof MQClientException && ((MQClientException) t).getResponseCode() > 0) {
                code = ((MQClientException) t).getResponseCode();
            }
            text.append(t.getClass().getSimpleName()).append(": ").append(t.getMessage()).append(" | ");
        }
        System.out.println("{\"error\":" + q(text.toString()) + ",\"code\":" + code + "}");
    }

    public static void main(String[] a) throws Exception {
        switch (a[0]) {
            case "produce": {
                DefaultMQProducer p = new DefaultMQProducer("acl-java-producer", hook(a[4], a[5]));
                p.setNamesrvAddr(a[1]);
                p.setRetryTimesWhenSendFailed(0);
                p.setSendMsgTimeout(15000);
                p.start();
                try {
                    for (int i = 0; i < Integer.parseInt(a[3]); i++) {
                        try {
                            SendResult r = p.send(new Message(a[2], "java", ("java-" + i).getBytes(StandardCharsets.UTF_8)));
                            System.out.println("{\"status\":" + q(r.getSendStatus().name()) + ",\"msgId\":" + q(r.getMsgId()) + "}");
                        } catch (Exception e) {
                            error(e);
                        }
                    }
                } finally {
                    p.shutdown();
                }
                break;
            }
            case "consume": {
                DefaultMQPushConsumer c = new DefaultMQPushConsumer(a[3], hook(a[6], a[7]), new AllocateMessageQueueAveragely());
                c.setNamesrvAddr(a[1]);
                c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
                c.subscribe(a[2], "*");
                ConcurrentLinkedQueue<String> got = new ConcurrentLinkedQueue<>();
                c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                    for (MessageExt m : msgs) got.add(new String(m.getBody(), StandardCharsets.UTF_8));
                    return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
                });
                c.start();
                long deadline = System.currentTimeMillis() + Long.parseLong(a[5]);
                while (got.size() < Integer.parseInt(a[4]) && System.currentTimeMillis() < deadline) Thread.sleep(50);
                c.shutdown();
                for (String body : got) System.out.println("{\"body\":" + q(body) + "}");
                System.out.println("{\"received\":" + got.size() + "}");
                break;
            }
            case "pull": {
                DefaultMQPullConsumer c = new DefaultMQPullConsumer(a[3], hook(a[4], a[5]));
                c.setNamesrvAddr(a[1]);
                c.start();
                try {
                    Set<MessageQueue> queues = c.fetchSubscribeMessageQueues(a[2]);
                    int found = 0;
                    for (MessageQueue mq : queues) {
                        PullResult r = c.pull(mq, "*", 0, 32);
                        if (r.getMsgFoundList() != null) found += r.getMsgFoundList().size();
                    }
                    System.out.println("{\"found\":" + found + "}");
                } catch (Exception e) {
                    error(e);
                } finally {
                    c.shutdown();
                }
                break;
            }
            case "createtopic": {
                DefaultMQAdminExt admin = new DefaultMQAdminExt(hook(a[4], a[5]));
                admin.setNamesrvAddr(a[1]);
                admin.setInstanceName("acl-admin-" + System.nanoTime());
                admin.start();
                try {
                    TopicConfig config = new TopicConfig(a[3], 2, 2, 6);
                    admin.createAndUpdateTopicConfig(a[2], config);
                    System.out.println("{\"created\":" + q(a[3]) + "}");
                } catch (Exception e) {
                    error(e);
                } finally {
                    admin.shutdown();
                }
                break;
            }
            default:
                System.err.println("unknown mode " + a[0]);
                System.exit(2);
        }
        System.exit(0);
    }
}
