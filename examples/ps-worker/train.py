"""TensorFlow parameter-server training from TF_CONFIG (tf.compat.v1 graph mode).

Parameter servers serve variables until they are stopped; each worker fits
y = 3x + 1 with the weight on ps task 0 and the bias on the last ps task,
runs a few steps through the parameter servers and exits 0.
"""

import json
import os
import socket

import tensorflow as tf

STEPS = int(os.environ.get("TRAIN_STEPS", "30"))


def main() -> None:
    config = json.loads(os.environ["TF_CONFIG"])
    cluster = tf.train.ClusterSpec(config["cluster"])
    kind, index = config["task"]["type"], config["task"]["index"]
    server = tf.distribute.Server(cluster, job_name=kind, task_index=index)
    if kind == "ps":
        print(f"ps {index} serving on {socket.gethostname()}", flush=True)
        server.join()  # never returns: ti-slurm stops the ps once every worker is done
        return

    tf.compat.v1.disable_eager_execution()
    n_ps = len(config["cluster"]["ps"])
    with tf.device("/job:ps/task:0"):
        w = tf.compat.v1.get_variable("w", [], initializer=tf.compat.v1.zeros_initializer())
    with tf.device(f"/job:ps/task:{n_ps - 1}"):
        b = tf.compat.v1.get_variable("b", [], initializer=tf.compat.v1.zeros_initializer())
        step = tf.compat.v1.train.get_or_create_global_step()
    with tf.device(f"/job:worker/task:{index}"):
        # x in [-1, 1] and a modest rate keep asynchronous updates stable: the workers apply
        # gradients computed from slightly stale variables (with x in [0, 1] and rate 0.5,
        # a staleness of two updates already diverges)
        x = tf.random.uniform([64], minval=-1.0, maxval=1.0, seed=index)
        loss = tf.reduce_mean(tf.square(w * x + b - (3.0 * x + 1.0)))
        train = tf.compat.v1.train.GradientDescentOptimizer(0.2).minimize(loss, global_step=step)

    session_config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{index}"])
    with tf.compat.v1.train.MonitoredTrainingSession(
        master=server.target, is_chief=(index == 0), config=session_config
    ) as sess:
        for _ in range(STEPS):
            value, _ = sess.run([loss, train])
        shared_step = sess.run(step)
        print(
            f"worker {index} on {socket.gethostname()} loss={value:.4f} w on {w.device} "
            f"b on {b.device} global_step={shared_step}",
            flush=True,
        )


if __name__ == "__main__":
    main()
