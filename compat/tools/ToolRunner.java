// Runs Apache Kafka's command-line tools (their main classes) one after another in one JVM,
// so that a test session starts one JVM instead of one per command (tests/apache_tools.py).
// Launched as a single source file: java -cp <kafka-tools classpath> compat/tools/ToolRunner.java
//
// Protocol, on standard input and output:
//   request:  one line, the main class and its arguments separated by TAB characters
//   response: one line "exit <status> <stdout bytes> <stderr bytes>", then the tool's standard
//             output and standard error (UTF-8), exactly that many bytes each
// The tools end through org.apache.kafka.common.utils.internals.Exit, whose procedure is
// replaced here by one that records the first status and unwinds the tool's main; a tool that
// returns normally ends with status 0, one that throws with status 1 (its trace on stderr);
// what a tool writes after its exit is dropped, as the JVM would have ended there.

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

import org.apache.kafka.common.utils.internals.Exit;

public final class ToolRunner {
    /** Thrown by the replaced exit procedure to unwind the tool. */
    static final class ExitCalled extends RuntimeException {
        ExitCalled() {
            super(null, null, false, false);
        }
    }

    private static volatile Integer status;

    /** Drops what the tool writes once it has called exit (a real JVM would have ended). */
    static final class UntilExit extends java.io.FilterOutputStream {
        UntilExit(OutputStream out) {
            super(out);
        }

        @Override
        public void write(int b) throws java.io.IOException {
            if (status == null) {
                out.write(b);
            }
        }

        @Override
        public void write(byte[] b, int off, int len) throws java.io.IOException {
            if (status == null) {
                out.write(b, off, len);
            }
        }
    }

    public static void main(String[] ignored) throws Exception {
        PrintStream realOut = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), false);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        System.setIn(new java.io.ByteArrayInputStream(new byte[0]));  // a tool's prompt reads end of input
        Exit.Procedure exit = (code, message) -> {
            if (status == null) {
                status = code;
            }
            throw new ExitCalled();
        };
        Exit.setExitProcedure(exit);
        Exit.setHaltProcedure(exit);
        Exit.setShutdownHookAdder((name, hook) -> { });
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) {
                continue;
            }
            String[] words = line.split("\t", -1);
            ByteArrayOutputStream out = new ByteArrayOutputStream();
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            int code = run(words[0], Arrays.copyOfRange(words, 1, words.length), out, err);
            byte[] o = out.toByteArray();
            byte[] e = err.toByteArray();
            realOut.print("exit " + code + " " + o.length + " " + e.length + "\n");
            realOut.write(o);
            realOut.write(e);
            realOut.flush();
        }
    }

    private static int run(String mainClass, String[] args, OutputStream out, OutputStream err) {
        PrintStream oldOut = System.out;
        PrintStream oldErr = System.err;
        PrintStream o = new PrintStream(new UntilExit(out), true, StandardCharsets.UTF_8);
        PrintStream e = new PrintStream(new UntilExit(err), true, StandardCharsets.UTF_8);
        System.setOut(o);
        System.setErr(e);
        status = null;
        try {
            Method main = Class.forName(mainClass).getMethod("main", String[].class);
            main.invoke(null, (Object) args);
            return status == null ? 0 : status;
        } catch (InvocationTargetException ex) {
            if (status != null) {
                return status;
            }
            ex.getCause().printStackTrace(e);
            return 1;
        } catch (ExitCalled ex) {
            return status;
        } catch (ReflectiveOperationException ex) {
            ex.printStackTrace(e);
            return 2;
        } finally {
            o.flush();
            e.flush();
            System.setOut(oldOut);
            System.setErr(oldErr);
        }
    }
}
