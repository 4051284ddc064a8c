package io.kaas.compat.connect;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/** The task configs both connectors hand out: the connector's own, plus each task's index
 *  (`task.index`) and the number of tasks (`task.count`). */
final class TaskConfigs {
    static final String TASK = "task.index";
    static final String TASKS = "task.count";

    private TaskConfigs() {
    }

    static List<Map<String, String>> numbered(Map<String, String> props, int tasks) {
        List<Map<String, String>> out = new ArrayList<>();
        for (int t = 0; t < tasks; t++) {
            Map<String, String> c = new HashMap<>(props);
            c.put(TASK, Integer.toString(t));
            c.put(TASKS, Integer.toString(tasks));
            out.add(c);
        }
        return out;
    }
}
