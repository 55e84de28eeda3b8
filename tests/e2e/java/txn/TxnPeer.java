// The official RocketMQ Java client's TransactionMQProducer (4.9.8) as a peer of pyrmq's transaction plugin.
//
//   java TxnPeer <namesrv> <topic> <group>
//
// Sends four transaction messages (keys commit-1, rollback-1, check-commit-1, check-rollback-1): the local
// transaction commits the first, rolls back the second and answers UNKNOW for the other two, whose broker
// check-back then commits / rolls back. Prints one JSON line per send and per check, then {"done":true} once both
// undecided transactions were checked (or after 30 s).
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.rocketmq.client.producer.LocalTransactionState;
import org.apache.rocketmq.client.producer.TransactionListener;
import org.apache.rocketmq.client.producer.TransactionMQProducer;
import org.apache.rocketmq.client.producer.TransactionSendResult;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

public class TxnPeer {
    static synchronized void emit(String json) {
        System.out.println(json);
        System.out.flush();
    }

    public static void main(String[] args) throws Exception {
        String namesrv = args[0], topic = args[1], group = args[2];
        CountDownLatch checked = new CountDownLatch(2);
        TransactionMQProducer producer = new TransactionMQProducer(group);
        producer.setNamesrvAddr(namesrv);
        producer.setTransactionListener(new TransactionListener() {
            @Override
            public LocalTransactionState executeLocalTransaction(Message msg, Object arg) {
                String keys = msg.getKeys();
                if (keys.startsWith("commit")) {
                    return LocalTransactionState.COMMIT_MESSAGE;
                }
                if (keys.startsWith("rollback")) {
                    return LocalTransactionState.ROLLBACK_MESSAGE;
                }
                return LocalTransactionState.UNKNOW;
            }

            @Override
            public LocalTransactionState checkLocalTransaction(MessageExt msg) {
                String keys = msg.getKeys();
                emit("{\"check\":\"" + keys + "\",\"topic\":\"" + msg.getTopic() + "\",\"queueOffset\":"
                        + msg.getQueueOffset() + ",\"checkTimes\":\"" + msg.getProperty("TRANSACTION_CHECK_TIMES") + "\"}");
                checked.countDown();
                return keys.startsWith("check-commit") ? LocalTransactionState.COMMIT_MESSAGE : LocalTransactionState.ROLLBACK_MESSAGE;
            }
        });
        producer.start();
        try {
            for (String keys : new String[] {"commit-1", "rollback-1", "check-commit-1", "check-rollback-1"}) {
                Message msg = new Message(topic, "java-tag", keys, ("body of " + keys).getBytes(StandardCharsets.UTF_8));
                msg.putUserProperty("shop", "17");
                TransactionSendResult result = producer.sendMessageInTransaction(msg, null);
                emit("{\"sent\":\"" + keys + "\",\"status\":\"" + result.getSendStatus() + "\",\"local\":\""
                        + result.getLocalTransactionState() + "\",\"msgId\":\"" + result.getMsgId() + "\"}");
            }
            boolean done = checked.await(30, TimeUnit.SECONDS);
            Thread.sleep(500); // the END_TRANSACTION of the last check is oneway: let it leave
            emit("{\"done\":" + done + "}");
        } finally {
            producer.shutdown();
        }
    }
}
